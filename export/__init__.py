"""torch -> ONNX export with validation; see `export.step`."""

from export.step import build_graph, export_model, stamp, write_validated

__all__ = ["build_graph", "export_model", "stamp", "write_validated"]
