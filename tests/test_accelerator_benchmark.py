"""benchmarks/accelerator.py's table: model-FLOP rates, MFU against the timed matmul, ratios to transformers."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))

import accelerator  # noqa: E402


def test_the_table_has_rates_mfu_and_ratios_to_transformers_eager():
    flops = accelerator.training_flops(accelerator.SMALL, *accelerator.SMALL["train"])
    rows = [
        {"workload": "train", "system": "transformers eager", "seconds": 0.2, "flops": flops},
        {"workload": "train", "system": "kbert torch eager", "seconds": 0.1, "flops": flops},
        {"workload": "decode", "system": "transformers eager", "seconds": 2.0, "tokens": 100},
        {"workload": "decode", "system": "kbert JAX (jit)", "seconds": 0.5, "tokens": 100},
        {"workload": "train", "system": "kbert torch jit_compile=True", "error": "fails (ValueError: x)"},
    ]
    lines = accelerator.build_table(rows, matmul_flops=flops / 0.05).splitlines()
    assert lines[3] == (f"| train | kbert torch eager | 100 ms | {flops / 0.1 / 1e12:.3g} TFLOP/s | 50% | 2.00 |")
    assert lines[5] == "| decode | kbert JAX (jit) | 200 tokens/s | | | 4.00 |"
    assert lines[6] == "| train | kbert torch jit_compile=True | fails (ValueError: x) | | | |"
    # 3 × (encoder forward + MLM head on 20 positions a row), the count
    h, n = accelerator.SMALL["hidden"], 8 * 32
    forward = 2 * n * 2 * (4 * h * h + 2 * h * 256 + 2 * 32 * h)
    assert flops == 3 * (forward + 2 * 8 * 20 * (h * h + h * 1000))
