"""Print the emitted step's figures on emulated Cortex-M cores as a Markdown table.

    .venv/bin/python scripts/firmware_table.py models/rnn-int8.onnx models/gru-int8.onnx models/lstm-int8.onnx

For each static int8 RNN/GRU/LSTM model, core (M4: SMLAD path; M0+: portable path) and
optimisation level: instructions per reading and per MAC, 64-bit helper instructions and
stack (measured), cycles (modelled from the executed mix), and .text/.rodata (measured).
Every run is first checked bit-exact with the simulator over 1,000 readings. About a minute.
"""

import sys

from edgeseq.errors import run_script

CONFIGS = [("cortex-m4", "-Os"), ("cortex-m4", "-O2"), ("cortex-m0plus", "-Os"), ("cortex-m0plus", "-O2")]


def main():
    from firmware_sim.measure import measure

    models = sys.argv[1:]
    if not models:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    print("| model | core | opt | instructions / reading | per MAC | 64-bit helper instr. | stack B | "
          "modelled cycles | .text B | .rodata B |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for path in models:
        for core, opt in CONFIGS:
            r = measure(path, core, opt, readings=1000, counted=4)
            helpers = sum(r["helper_instructions_per_step"].values())
            print(f"| {r['arch']} h{r['hidden']} | {core} | {opt} | {r['instructions_per_step']:,.0f} | "
                  f"{r['instructions_per_mac']:.2f} | {helpers:,.0f} | {r['stack_bytes']} | "
                  f"{r.get('cycles_per_step', float('nan')):,.0f} | {r['sections']['text']:,} | "
                  f"{r['sections']['rodata']:,} |")
    return 0


if __name__ == "__main__":
    run_script(main)
