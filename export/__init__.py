"""torch -> ONNX export with validation; see `export.step` (float) and `export.quantize` (int8)."""

from export.quantize import export_int8
from export.step import build_graph, export_model, stamp, write_validated

__all__ = ["build_graph", "export_int8", "export_model", "stamp", "write_validated"]
