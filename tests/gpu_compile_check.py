"""Compile, for an sm_90 GPU, every kernel variant kvfuzz's own kernels launch over each op's
case stream, on a machine without a GPU (run as a script by tests/test_compiles_for_gpu.py).

The Triton interpreter runs a kernel's Python; compiled Triton is stricter (a plain global
read inside a kernel, say, is a NameError there). Triton's NVIDIA backend needs no GPU to
compile: a stand-in driver reports an sm_90 target, each launch compiles its variant for real
(source -> TTIR -> ... -> cubin) and then does nothing. Prints one line per compile failure and
exits 1 if there was any.

usage: python tests/gpu_compile_check.py [CASES_PER_CLASS]
"""

from __future__ import annotations

import os
import sys

os.environ.pop("TRITON_INTERPRET", None)


def main(per_class: int) -> int:
    import torch
    from triton.backends.compiler import GPUTarget
    from triton.runtime import jit
    from triton.runtime.driver import driver

    class StandInDriver:
        def get_current_device(self):
            return 0

        def get_current_stream(self, device=None):
            return 0

        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)

    class LaunchesNothing:
        function = None
        packed_metadata = None

        def launch_metadata(self, grid, stream, *args):
            return None

        def run(self, *args):
            pass

    failures: list[str] = []
    compiled = [0]

    def do_compile(self, key, signature, device, constexprs, options, attrs, warmup):
        kernel_cache, _, target, _, _ = self.device_caches[device]
        try:
            self.compile(self.ASTSource(self, signature, constexprs, attrs), target=target, options=options.__dict__)
            compiled[0] += 1
        except Exception as exc:
            line = f"{self.fn.__name__} {dict(constexprs)}: {type(exc).__name__}: {str(exc).strip()}"
            failures.append(line.replace("\n", " | ")[:600])
            raise
        kernel_cache[key] = LaunchesNothing()
        return kernel_cache[key]

    driver.set_active(StandInDriver())
    jit.JITFunction._do_compile = do_compile

    import kvfuzz.kernels as builtin
    from kvfuzz.engines.batch_engine import case_stream
    from kvfuzz.materialize import to_device
    from kvfuzz.execute import prepare
    from kvfuzz.ops import CONTRACTS
    from kvfuzz.targets.calls import bind

    cpu = torch.device("cpu")
    for op, contract in CONTRACTS.items():
        binding = bind(op, getattr(builtin, contract.entry), where="builtin")
        before = len(failures)
        for _, case in case_stream(op, 3, 48 * per_class, "cuda", stint=per_class):
            views = to_device(prepare(case).plan, cpu)[1]
            try:
                binding(views, case.scalars)
            except Exception:
                pass  # a refusal, or a compile failure (recorded)
        print(f"{op}: {len(failures) - before} compile failures", flush=True)
    print(f"{compiled[0]} kernel variants compiled for sm_90")
    for line in dict.fromkeys(failures):
        print("FAILED", line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2))
