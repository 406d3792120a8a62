#!/usr/bin/env bash
# The Raspberry Pi path on emulated arm64: a Debian arm64 root (qemu user emulation), the
# runtime-only install in it, and the checks a Pi would run.
#
#     sudo scripts/arm64_pi.sh          # from the repository root; 20-40 min the first time
#     sudo scripts/arm64_pi.sh --json docs/figures/pi_arm64.json   # also the figures as JSON
#
# 1. builds, once, a Debian arm64 root from Debian's packages (mmdebstrap) under
#    $EDGESEQ_ARM64_CACHE (default ~/.cache/edgeseq-arm64/root) and reuses it after;
# 2. on the host, with a Python that has the training install (.venv/bin/python): trains a
#    GRU on BasicMotions and exports it float and int8 (or takes $EDGESEQ_ARM64_MODELS, a
#    folder with gru.onnx and gru-int8.onnx), and saves the host's outputs for them
#    (scripts/arm64_check.py ref);
# 3. in the root: a fresh venv and `pip install '.[pi]'` from a copy of the working tree (the
#    files git tracks plus untracked ones it does not ignore), the C extension compiled by the
#    root's aarch64 gcc;
# 4. in the root: scripts/arm64_check.py check (torch absent; backend="native" opens, i.e. its
#    probe against onnxruntime passes; outputs against the host's, bit for bit) and
#    examples/pi_sensor_demo.py on replay:basicmotions, native and onnxruntime;
# 5. prints the figures (with --json PATH also writes them there, with the command, the host's
#    CPU and the date). Every latency is
#    measured under qemu emulation on the host's CPU: it says the code runs on arm64, not how
#    fast a Pi is.
#
# Emulation ($EDGESEQ_ARM64_EMU): `binfmt` runs arm64 programs through the kernel's binfmt_misc
# with qemu-aarch64-static registered with the F flag (the interpreter opened at registration,
# so it works inside a chroot); the script registers it where it can (root, binfmt_misc
# mountable). `proot` needs no binfmt_misc: proot -q qemu-aarch64-static runs every program of
# the root under qemu explicitly, and the root is built with debootstrap --foreign plus its
# second stage under proot. `auto` (default) takes binfmt where it works, else proot. proot must
# translate faccessat2 (proot-me/proot#338; Debian bookworm's proot 5.1.0 does not): without it
# access() in the root checks the host's paths, and gcc cannot find its cc1.
#
# Other settings: EDGESEQ_ARM64_SUITE (bookworm), EDGESEQ_ARM64_MIRROR (deb.debian.org),
# EDGESEQ_HOST_PYTHON (.venv/bin/python), EDGESEQ_ARM64_READINGS (2000, the demo's and the
# bit-for-bit comparison's readings). Needs root (chroot, mounts, apt for the host tools).
set -euo pipefail
{
CACHE=${EDGESEQ_ARM64_CACHE:-$HOME/.cache/edgeseq-arm64}
SUITE=${EDGESEQ_ARM64_SUITE:-bookworm}
MIRROR=${EDGESEQ_ARM64_MIRROR:-http://deb.debian.org/debian}
EMU=${EDGESEQ_ARM64_EMU:-auto}
HOST_PY=${EDGESEQ_HOST_PYTHON:-.venv/bin/python}
N=${EDGESEQ_ARM64_READINGS:-2000}
ROOT=$CACHE/root
PKGS=python3,python3-venv,python3-dev,gcc,libc6-dev,binutils,ca-certificates
RUN=/opt/edgeseq-run           # inside the root: models, host outputs, logs
SRC=/opt/edgeseq-src           # inside the root: the copy of the working tree
VENV=/opt/edgeseq-venv

say() { printf '\n== %s\n' "$*" >&2; }
die() { printf 'Error: %s\n' "$*" >&2; exit 1; }

ARGS="$*"
JSON=
while [ $# -gt 0 ]; do
  case $1 in
    --json) [ $# -ge 2 ] || die "--json needs a path"; JSON=$(realpath -m -- "$2"); shift 2 ;;
    *) die "unknown argument '$1' (the one option is --json PATH)" ;;
  esac
done

cd "$(dirname "$0")/.."
[ -f pyproject.toml ] && [ -d edgeseq/runtime/native ] || die "run from an edgeseq checkout"
[ "$(id -u)" = 0 ] || die "needs root (chroot, mounts, apt); run it with sudo"
[ "$(uname -m)" = x86_64 ] || die "written for an x86-64 host (it compares arm64 against the host's x86 outputs)"
"$HOST_PY" -c 'import torch, edgeseq' 2>/dev/null || [ -n "${EDGESEQ_ARM64_MODELS:-}" ] ||
  die "$HOST_PY cannot import torch and edgeseq: run \`make setup\` first, or set EDGESEQ_ARM64_MODELS to a folder with gru.onnx and gru-int8.onnx"

# -- host tools -------------------------------------------------------------------------------
need=()
for t in mmdebstrap:mmdebstrap debootstrap:debootstrap qemu-aarch64-static:qemu-user-static \
         update-binfmts:binfmt-support arch-test:arch-test proot:proot; do
  command -v "${t%%:*}" >/dev/null || need+=("${t#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  say "installing host tools: ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" debian-archive-keyring >/dev/null
fi

# -- emulation: binfmt_misc (F flag) where it can be had, else proot -------------------------
binfmt_ok() {
  local f=/proc/sys/fs/binfmt_misc/qemu-aarch64
  [ -r "$f" ] && grep -qx enabled "$f" && grep -q '^flags: .*F' "$f"
}
if [ "$EMU" != proot ] && ! binfmt_ok; then
  [ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null || true
  update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || update-binfmts --import qemu-aarch64 >/dev/null 2>&1 || true
fi
if [ "$EMU" = auto ]; then
  if binfmt_ok; then EMU=binfmt; else EMU=proot; fi
fi
case $EMU in
  binfmt) binfmt_ok || die "EDGESEQ_ARM64_EMU=binfmt, but qemu-aarch64 is not registered in binfmt_misc with the F flag" ;;
  proot) ;;
  *) die "EDGESEQ_ARM64_EMU must be auto, binfmt or proot, not '$EMU'" ;;
esac
QEMU=$(command -v qemu-aarch64-static)

# Run a shell command in the root as root, with a clean environment. binfmt: chroot in a private
# mount namespace (its /proc and /dev go away with it); proot: every program under qemu. No /sys:
# given the host's CPU lists there, onnxruntime's cpuinfo crashes under qemu-user (SIGSEGV on the
# first InferenceSession); without them it prints that it cannot read them, and runs.
ENVS=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
      PIP_CERT=/etc/ssl/certs/edgeseq-host-ca.crt PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180
      PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1)
in_root() {
  if [ "$EMU" = binfmt ]; then
    unshare --mount --fork /bin/sh -c '
      mount -t proc proc "$1/proc" && mount --rbind /dev "$1/dev" && shift && exec chroot "$@"' \
      sh "$ROOT" "$ROOT" /usr/bin/env -i "${ENVS[@]}" /bin/sh -c "$1"
  else
    proot -q "$QEMU" -0 -r "$ROOT" -b /proc -b /dev -w / /usr/bin/env -i "${ENVS[@]}" /bin/sh -c "$1"
  fi
}

# -- 1. the arm64 root, built once ------------------------------------------------------------
t_root=cached
if [ ! -e "$ROOT/.edgeseq-root" ]; then
  say "building a Debian $SUITE arm64 root in $ROOT ($EMU emulation; 10-30 min)"
  mkdir -p "$CACHE"
  rm -rf "$ROOT.tmp"
  t0=$SECONDS
  if [ "$EMU" = binfmt ]; then
    nice -n 10 mmdebstrap --mode=root --arch=arm64 --variant=apt --include="$PKGS" "$SUITE" "$ROOT.tmp" "$MIRROR"
  else
    nice -n 10 debootstrap --foreign --arch=arm64 --variant=minbase --include="$PKGS" "$SUITE" "$ROOT.tmp" "$MIRROR"
    # the first stage leaves /proc a link to the host's /proc, which proot cannot bind over
    if [ -L "$ROOT.tmp/proc" ]; then rm "$ROOT.tmp/proc" && mkdir "$ROOT.tmp/proc"; fi
    nice -n 10 proot -q "$QEMU" -0 -r "$ROOT.tmp" -b /proc -b /dev -w / \
      /usr/bin/env -i "${ENVS[@]}" DEBOOTSTRAP_DIR=/debootstrap /bin/sh /debootstrap/debootstrap --second-stage
  fi
  echo "$SUITE arm64, $(date -u +%F)" > "$ROOT.tmp/.edgeseq-root"
  mv "$ROOT.tmp" "$ROOT"
  t_root=$((SECONDS - t0))
fi
cp /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true
# the host's CA bundle: it carries any certificate a TLS-intercepting proxy here needs
cp "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}" "$ROOT/etc/ssl/certs/edgeseq-host-ca.crt"
in_root 'uname -m; python3 --version; gcc --version | head -1' | tr '\n' ' ' >&2; echo >&2
if ! in_root 'test -x "$(gcc -print-prog-name=cc1)"'; then
  [ "$EMU" != proot ] || die "gcc in the root cannot find its cc1 under proot $(proot --version 2>&1 |
    grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -1) (it must translate faccessat2, proot-me/proot#338); use a newer proot or binfmt_misc"
  die "gcc in the root cannot find its cc1 (is the root complete? remove $ROOT to rebuild it)"
fi

# -- 2. models and the host's outputs ---------------------------------------------------------
rm -rf "$ROOT$RUN" && mkdir -p "$ROOT$RUN/models"
if [ -n "${EDGESEQ_ARM64_MODELS:-}" ]; then
  cp "$EDGESEQ_ARM64_MODELS/gru.onnx" "$EDGESEQ_ARM64_MODELS/gru-int8.onnx" "$ROOT$RUN/models/"
else
  say "host: training a GRU and exporting it float and int8 ($HOST_PY)"
  nice -n 10 "$HOST_PY" -m edgeseq train --arch gru --out "$ROOT$RUN/run-gru" --quiet >/dev/null
  nice -n 10 "$HOST_PY" -m edgeseq export "$ROOT$RUN/run-gru" --out "$ROOT$RUN/models/gru.onnx" >/dev/null
  nice -n 10 "$HOST_PY" -m edgeseq export "$ROOT$RUN/run-gru" --int8 --out "$ROOT$RUN/models/gru-int8.onnx" >/dev/null
fi
say "host: reference outputs (native and onnxruntime, $N readings)"
nice -n 10 "$HOST_PY" scripts/arm64_check.py ref --models "$ROOT$RUN/models" --out "$ROOT$RUN/host.npz" --readings "$N"

# -- 3. the runtime install in the root -------------------------------------------------------
say "copying the working tree to $SRC in the root"
rm -rf "$ROOT$SRC" && mkdir -p "$ROOT$SRC"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z -co --exclude-standard | tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$ROOT$SRC"
else
  tar --exclude=./.venv --exclude=./build --exclude=./runs --exclude=./models --exclude='*.so' -cf - . | tar -xf - -C "$ROOT$SRC"
fi
find "$ROOT$SRC" -name '*.so' -delete
pipcache=warm; in_root '[ -d /root/.cache/pip ]' || pipcache=cold
say "root: python3 -m venv and pip install '.[pi]' (pip cache $pipcache)"
t0=$SECONDS
in_root "rm -rf $VENV && python3 -m venv $VENV && cd $SRC && nice -n 10 $VENV/bin/pip install -v --log $RUN/pip-times.log '.[pi]' > $RUN/pip.log 2>&1" ||
  { tail -30 "$ROOT$RUN/pip.log" >&2; die "pip install '.[pi]' failed in the arm64 root (log: $ROOT$RUN/pip.log)"; }
t_install=$((SECONDS - t0))
grep -E 'edgeseq native: compiling [0-9]+ of' "$ROOT$RUN/pip.log" | head -1 | sed 's/^ *//' >&2 || true
# The extension is several translation units (edgeseq/runtime/native/*.c and their headers).
warnings=$(grep -cE '[^ ]*\.(c|h):[0-9]+:[0-9]+: warning:' "$ROOT$RUN/pip.log" || true)
so=$(in_root "ls $VENV/lib/python3*/site-packages/edgeseq/runtime/native/_es_native*.so" 2>/dev/null || true)
[ -n "$so" ] || { grep -iE 'error|warning' "$ROOT$RUN/pip.log" | head -20 >&2; die "the C extension was not built in the root (setup.py treats it as optional; log: $ROOT$RUN/pip.log)"; }
neon=$(in_root "objdump -d $so | grep -cE '\\s(fmla|fmul|fadd)\\s+v[0-9]+\\.4s'" || true)
echo "built $(basename "$so"): $warnings compiler warnings, $neon NEON float vector instructions (fmla/fmul/fadd .4s)" >&2

# -- 4. checks in the root --------------------------------------------------------------------
say "root: torch absent, native parity (probe), outputs against the host's, push timing (emulated)"
rc=0
in_root "cd $RUN && $VENV/bin/python $SRC/scripts/arm64_check.py check --models $RUN/models --ref $RUN/host.npz --json $RUN/check.json > $RUN/check.out 2>&1" || rc=$?
cat "$ROOT$RUN/check.out" >&2
[ -s "$ROOT$RUN/check.json" ] || die "the arm64 checks did not finish (see above)"

for backend in native onnxruntime; do
  say "root: examples/pi_sensor_demo.py, gru-int8, --backend $backend, $N readings unpaced (emulated)"
  in_root "cd $RUN && $VENV/bin/python $SRC/examples/pi_sensor_demo.py --model $RUN/models/gru-int8.onnx \
    --source replay:basicmotions --rate 0 --max-readings $N --json --backend $backend > $RUN/demo-$backend.jsonl 2> $RUN/demo-$backend.err" ||
    { cat "$ROOT$RUN/demo-$backend.err" >&2; die "the demo failed in the arm64 root (--backend $backend)"; }
  tail -n 2 "$ROOT$RUN/demo-$backend.jsonl" | head -n 1 >&2
  cat "$ROOT$RUN/demo-$backend.err" >&2
done

# -- 5. figures -------------------------------------------------------------------------------
HOST_CPU=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
DATE=$(date -u '+%F %H:%M UTC')
say "figures (arm64 under qemu user emulation on $HOST_CPU; $DATE)"
"$HOST_PY" - "$ROOT$RUN" "$EMU" "$t_root" "$t_install" "$pipcache" "$warnings" "$neon" "$JSON" "$HOST_CPU" "$DATE" \
  "scripts/arm64_pi.sh${ARGS:+ $ARGS}" <<'EOF'
import json, re, sys
run, emu, t_root, t_install, pipcache, warnings, neon, json_path, host_cpu, date, command = sys.argv[1:]
c = json.load(open(f"{run}/check.json"))
demo = {}
for b in ("native", "onnxruntime"):
    for line in open(f"{run}/demo-{b}.jsonl"):
        if line.startswith('{"summary"'):
            demo[b] = json.loads(line)["summary"]
print(f"root: {c['machine']}, Python {c['python']}, numpy {c['numpy']}, onnxruntime {c['onnxruntime']}; "
      f"emulation: {emu}; root build: {t_root}{' s' if t_root != 'cached' else ''}; "
      f"venv + pip install '.[pi]': {t_install} s (pip cache {pipcache})")
# setup.py compiles the extension's units in parallel and ends with "edgeseq native: built NAME in N s".
built = [m.group(1) for line in open(f"{run}/pip.log", errors="replace")
         for m in [re.search(r"edgeseq native: built \S+ in (\d+) s", line)] if m]
print(f"  of which the native extension's build (aarch64 gcc, emulated): "
      f"{built[-1] + ' s' if built else 'n/a'}; {warnings} compiler warnings; "
      f"{neon} NEON float vector instructions (fmla/fmul/fadd .4s) in the extension")
print(f"torch: imported {c['torch_imported']}, installed {c['torch_installed']}; native extension: "
      f"{c['native_available']} ({c['simd']})")
for name, m in c["models"].items():
    nh, oh, here = m.get("native_vs_host", {}), m.get("onnxruntime_vs_host", {}), m.get("native_vs_ort_here", {})
    print(f"{name}: backend='native' {'opened (probe vs onnxruntime passed)' if m['native_opened'] else 'REFUSED: ' + m.get('native_error', '')}")
    if here:
        print(f"  native vs onnxruntime on arm64, {m['readings']} readings: probs max |diff| {here['probs_max_abs']:.3g}, "
              f"logits {here['logits_max_abs']:.3g}, same class {here['argmax_equal']:.1%}")
    for what, d in (("native", nh), ("onnxruntime", oh)):
        if d:
            print(f"  {what} arm64 vs x86 host ({c['host']}): probs {'bit-equal' if d['probs_bit_equal'] else 'differ'} "
                  f"(max |diff| {d['probs_max_abs']:.3g}, {d['probs_differing_values']} values differ), logits "
                  f"{'bit-equal' if d['logits_bit_equal'] else 'differ'} (max |diff| {d['logits_max_abs']:.3g}), "
                  f"same class {d['argmax_equal']:.1%}")
    for what in ("native", "onnxruntime"):
        t = m.get(f"{what}_push_us")
        if t:
            print(f"  StreamSession.push, {what}: median {t['median']} us, p99 {t['p99']} us (emulated, {t['readings']} readings)")
for b, s in demo.items():
    print(f"demo gru-int8 --backend {b}: {s.get('readings')} readings, latency median {s.get('median_us')} us, "
          f"p99 {s.get('p99_us')} us, {s.get('rate_hz')} readings/s, RSS {s.get('rss_kb_end')} kB (emulated); "
          f"accuracy {(s.get('true_labels') or {}).get('accuracy')}")
print("every time above is qemu emulation on an x86 host: a Pi's own figures will differ")
if json_path:
    figures = {"check": c, "demo": demo, "emulation": emu, "root_build_s": t_root if t_root == "cached" else int(t_root),
               "install_s": int(t_install), "pip_cache": pipcache, "native_build_s": int(built[-1]) if built else None,
               "warnings": int(warnings or 0), "neon": int(neon or 0), "host_cpu": host_cpu, "date": date,
               "command": f"sudo {command}", "machine": {k: c[k] for k in ("machine", "python", "numpy", "onnxruntime")}}
    with open(json_path, "w") as f:
        f.write(json.dumps(figures, indent=1) + "\n")
    print(f"figures written to {json_path}")
EOF
exit $rc
}
