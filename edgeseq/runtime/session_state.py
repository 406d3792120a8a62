"""The checks a snapshot or state file passes before StreamSession.restore installs it: shapes,
dtypes, positions, values the model can write, and one probe step from the restored state."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnxruntime as ort

from edgeseq import contract
from edgeseq.errors import UsageError
from edgeseq.runtime.session_checks import MAX_HISTORY, MAX_POSITION, STATE_BOUND, STATE_C_BOUND, \
    STATE_C_BOUND_INT8, STATE_H_BOUND, GAIN_BOUND


class SnapshotChecks:
    """StreamSession's restore path (a mixin: it reads the session's meta, streams, backend and
    buffers). `_check_snapshot` validates, `_apply_probed` installs after one probe step."""

    def _state_bound(self, spec: contract.StateSpec) -> tuple:
        """(largest |value| the model writes into state `spec`, why): see `restore`."""
        arch, role = self.meta.arch, spec.role
        if role == contract.GAIN_ROLE:
            return GAIN_BOUND, ("the gain stage's level over its floor lies within 0..log(float32 max / 4), "
                                "0..87.3 nepers, for any reading the session takes")
        if not role and arch in ("rnn", "gru") and spec.kind == contract.KIND_FIXED:
            role = "h."
        if arch in ("rnn", "gru", "lstm") and role.startswith("h."):
            name = "a GRU" if arch == "gru" else f"an {arch.upper()}"
            return STATE_H_BOUND, f"{name}'s hidden state is a tanh output, within [-1, 1]"
        if arch == "lstm" and role.startswith("c."):
            if self._native is not None and getattr(self._native, "_integer", False):
                return STATE_C_BOUND_INT8, "the native int8 step holds an LSTM cell as int32 Q15, within +-65536"
            return STATE_C_BOUND, "an LSTM cell moves by at most 1 a reading, and no further than 2^25 in float32"
        return STATE_BOUND, "more than this model's state reaches from any reading (2^64)"

    def _probe_readings(self) -> np.ndarray:
        """The reading whose normalised value is 0 (the training mean, in raw units), every stream."""
        mean = contract.raw_readings(self.meta.normalization, np.zeros(self.n_features))
        return np.ascontiguousarray(np.broadcast_to(mean, (self.streams, self.n_features)))

    def _graph_probe(self, position: np.ndarray, arrays: list):
        """The first stream whose step from `arrays` (at the training mean) gives NaN or Inf
        logits or state in the graph (onnxruntime; batch-1 calls where streams interact), or
        None. Changes nothing."""
        x = self._probe_readings()
        names = [contract.LOGITS] + [s.output for s in self.meta.state]
        rows = [slice(i, i + 1) for i in range(self.streams)] if self.meta.batch_dependent else [slice(None)]
        with np.errstate(all="ignore"):
            for r in rows:
                feeds = {contract.READING: x[r], **{s.name: np.ascontiguousarray(a[r])
                                                    for s, a in zip(self.meta.state, arrays)}}
                if self._has_position:
                    feeds[contract.POSITION] = np.ascontiguousarray(position[r])
                out = self.session.run(names, feeds)
                ok = np.ones(out[0].shape[0], bool)
                for v in out:
                    ok &= np.isfinite(v.reshape(v.shape[0], -1)).all(axis=1)
                if not ok.all():
                    return int(np.argmin(ok)) + (r.start or 0)
        return None

    def _apply_probed(self, position: np.ndarray, arrays: list) -> None:
        """`_apply`, once one step from the restored state gives finite logits on this
        session's backend (see `restore`); UsageError and the session as it was otherwise."""
        nat = self._native
        if nat is None or getattr(nat, "_integer", False):   # integer logits are always finite
            bad = self._graph_probe(position, arrays) if nat is None else None
        else:
            old_position, old_state = self._position(), [a.copy() for a in nat.state]
            self._apply(position, arrays)
            np.copyto(nat.x, self._probe_readings())
            with np.errstate(all="ignore"):
                rc = nat.run()
                if rc == -5:
                    nat.grow()
                    rc = nat.run()
            bad = self._graph_probe(position, arrays) if rc == -4 else (rc if rc >= 0 else None)
            if bad is not None:
                self._apply(old_position, old_state)
        if bad is not None:
            raise UsageError(f"snapshot state gives NaN or Inf for stream {bad} one step on (at the training mean): "
                             "this model cannot have written it; session state unchanged")
        self._apply(position, arrays)

    def _check_snapshot(self, snap) -> tuple:
        """(int64 [streams] positions, [float32 C-contiguous arrays]) from a snapshot, or UsageError."""
        def bad(what):
            return UsageError(f"snapshot {what}; session state unchanged")
        if not isinstance(snap, Mapping):
            raise bad(f"must be a dict with 'state' and 'position' (from snapshot()), got {type(snap).__name__}")
        for key in ("state", "position"):
            if key not in snap:
                raise bad(f"lacks '{key}'")
        arrays = snap["state"]
        if not isinstance(arrays, (list, tuple)):
            raise bad(f"'state' must be a list of arrays, got {type(arrays).__name__}")
        specs = self.meta.state
        if len(arrays) != len(specs):
            raise bad(f"holds {len(arrays)} state tensors, this model has {len(specs)}")
        out, history = [], None
        for i, (spec, a) in enumerate(zip(specs, arrays)):
            what = f"state {i} ('{spec.name}')"
            try:
                a = np.asarray(a)
            except (ValueError, TypeError):
                raise bad(f"{what} is not an array") from None
            if a.dtype.kind not in "fiu":
                raise bad(f"{what} has dtype {a.dtype}; it must hold real numbers (float32)")
            if a.ndim != len(spec.shape):
                raise bad(f"{what} has shape {list(a.shape)}; this session needs {self._shape(spec, 'history')}")
            if spec.kind == contract.KIND_GROWING:
                t = a.shape[contract.GROWING_HISTORY_AXIS]
                if history is not None and t != history:
                    raise bad(f"{what} has {t} history rows, an earlier tensor {history}; they must agree")
                history = t
            want = self._shape(spec, history)
            if list(a.shape) != want:
                raise bad(f"{what} has shape {list(a.shape)}; this session needs {want} (streams first)")
            with np.errstate(over="ignore", invalid="ignore"):
                f = np.ascontiguousarray(a, np.float32)
            if f is a:
                f = f.copy()                 # never share memory with the caller's arrays
            if not np.isfinite(f).all():
                raise bad(f"{what} holds NaN or Inf (or values beyond float32's range)")
            bound, why = self._state_bound(spec)
            beyond = (np.abs(f) > bound) | ((f < 0) if spec.role == contract.GAIN_ROLE else False)
            if beyond.any():
                at = np.unravel_index(int(np.argmax(beyond)), f.shape)
                raise bad(f"{what} holds {float(f[at]):g} (stream {at[0]}), beyond +-{bound:g}: {why}; this model "
                          "cannot have written it")
            out.append(f)
        if history is not None and self.max_history is not None and history > self.max_history:
            if self.on_full != "slide":
                raise bad(f"holds {history} history rows, more than this session's max_history {self.max_history} "
                          "(with on_full 'slide' the newest would be kept)")
            keep = range(history - self.max_history, history)    # what sliding would have kept: the newest rows
            out = [np.ascontiguousarray(np.take(f, keep, axis=contract.GROWING_HISTORY_AXIS))
                   if spec.kind == contract.KIND_GROWING else f for spec, f in zip(specs, out)]
            history = self.max_history
        if history is not None and history > MAX_HISTORY:
            raise bad(f"holds {history} history rows, more than any model takes ({MAX_HISTORY:,})")
        try:
            p = np.asarray(snap["position"])
        except (ValueError, TypeError):
            raise bad("'position' is not an array") from None
        if p.dtype.kind not in "iu":
            raise bad(f"'position' has dtype {p.dtype}; it must hold whole numbers of readings")
        if p.shape != (self.streams,):
            raise bad(f"'position' has shape {list(p.shape)}; this session needs [{self.streams}] (one per stream)")
        if p.size and (int(p.min()) < 0 or int(p.max()) > MAX_POSITION):
            raise bad(f"'position' holds {int(p.min()) if int(p.min()) < 0 else int(p.max())}; "
                      "positions are readings seen, >= 0")
        return p.astype(np.int64), out

    def _apply(self, position: np.ndarray, arrays: list) -> None:
        """Install checked state (see `_check_snapshot`): nothing here can fail half way."""
        if self._native is not None:
            if self.growing:                             # the ring lays its rows out by position
                self._native.set_state(arrays, position)
            else:
                self._native.set_state(arrays)
            self._set_position(slice(None), position)
            return
        if self._subs is not None:
            for i, sub in enumerate(self._subs):
                sub._apply(position[i:i + 1], [np.ascontiguousarray(a[i:i + 1]) for a in arrays])
            return
        if self.growing:
            self._state = [ort.OrtValue.ortvalue_from_numpy(a, self.device, 0) for a in arrays]
        else:
            for v, a in zip(self._state, arrays):
                v.update_inplace(a)
        self._set_position(slice(None), position)
