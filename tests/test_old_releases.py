"""SGLang 0.5.6 - 0.5.12 as targets: their metadata entry points are taken out of the attention
backend modules' source (kvfuzz/targets/extract.py) without importing those modules, and written
as a generated kernel file into the cache (the KV-index kernels the same way, into kv_indices.py:
FlashInfer's and FlashMLA's from the attention utils.py, the chunked prefix's from ForwardBatch's
module; tests/test_flashinfer_kv_indices.py, test_flashmla_kv_indices.py and
test_chunked_prefix_kv_indices.py run them). A kv_indices.py an older kvfuzz extracted (FlashInfer's
kernel alone) is extracted again.

The extractor is tested on a small backend-like module written here (it imports a package that
does not exist); the releases themselves come from the PyPI wheels (skipped, with the reason, when
PyPI cannot be reached and the cache lacks them, as in test_releases.py).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

import cases
from kvfuzz.errors import TargetLoadError
from kvfuzz.execute import run_case
from kvfuzz.judge import judge
from kvfuzz.targets.extract import ExtractError, Source, extract
from kvfuzz.targets.releases import RELEASES, release_entry, variant_for_release
from test_releases import DECODE_CASES, in_contract, kernel_file, release_target

MISSING = "kvfuzz_no_such_package"  # imported by the fixture module; must never be imported

BACKEND = textwrap.dedent(f"""\
    from __future__ import annotations

    import os
    from typing import Optional

    import torch
    import triton
    import triton.language as tl
    from {MISSING}.layers import Backend, fused_op
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool

    BLOCK = 64
    UNUSED = fused_op(3)


    class AttnBackend(Backend):
        def forward(self, x):
            return fused_op(x)


    @triton.jit
    def _double_kernel(src, dst, n, SCALE: tl.constexpr, BLOCK_N: tl.constexpr):
        offs = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        tl.store(dst + offs, tl.load(src + offs, mask=offs < n) * SCALE, mask=offs < n)


    def _scale() -> int:
        return 2


    def double(src: torch.Tensor, dst: torch.Tensor, pool: Optional[SWAKVPool] = None):
        n = src.shape[0]
        _double_kernel[(triton.cdiv(n, BLOCK),)](src, dst, n, SCALE=_scale(), BLOCK_N=BLOCK)


    def uses_backend(x):
        return AttnBackend().forward(x)


    if os.environ.get("X"):
        LATE = 1


    def uses_late(x):
        return x + LATE
    """)


def load_generated(path):
    spec = importlib.util.spec_from_file_location(f"kvfuzz_test_extracted_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_extracted_entry_point_loads_and_runs_without_the_modules_imports(tmp_path, device):
    import torch

    text = extract([Source(BACKEND, "fake/backend.py", ("double",))], "# generated for a test")
    assert text.startswith("# generated for a test\n")
    defined = {getattr(n, "name", None) for n in ast.parse(text).body}
    assert {"_double_kernel", "_scale", "double"} <= defined  # the kernel and helper it needs
    assert not {"AttnBackend", "uses_backend", "uses_late"} & defined  # nothing else
    assert MISSING not in text and "import os" not in text and "UNUSED" not in text
    assert "BLOCK = 64" in text and "from typing" not in text  # annotations are never evaluated here
    path = tmp_path / "metadata.py"
    path.write_text(text)
    from kvfuzz.targets.sglang_shim import ensure_swa_pool_type

    ensure_swa_pool_type()  # the one non-torch/triton import allowed: kvfuzz's stand-in
    module = load_generated(path)
    assert MISSING not in sys.modules
    src = torch.arange(100, dtype=torch.int32, device=device)  # compiled on CUDA, interpreted on the CPU
    dst = torch.full((100,), -1, dtype=torch.int32, device=device)
    module.double(src, dst)  # @triton.jit read its source from the generated file
    assert dst.tolist() == [2 * i for i in range(100)]


@pytest.mark.parametrize("entry, why", [
    ("uses_backend", f"uses_backend -> AttnBackend needs `from {MISSING}.layers import Backend`"),
    ("uses_late", "uses_late needs LATE, which the module binds conditionally"),
    ("nowhere", "defines no nowhere at module level"),
])
def test_an_entry_point_needing_anything_else_is_refused_in_one_line(entry, why):
    with pytest.raises(ExtractError) as err:
        extract([Source(BACKEND, "fake/backend.py", (entry,))], "#")
    assert why in str(err.value) and "\n" not in str(err.value)
    assert isinstance(err.value, TargetLoadError)  # the CLI's one-line error, exit 2


def test_two_modules_defining_a_needed_name_differently_are_refused():
    other = "import torch\n\ndef _scale():\n    return 3\n\ndef triple(x):\n    return x * _scale()\n"
    extract([Source(BACKEND, "a.py", ("double",)), Source(BACKEND, "b.py", ("double",))], "#")  # same text: once
    with pytest.raises(ExtractError, match="define _scale differently"):
        extract([Source(BACKEND, "a.py", ("double",)), Source(other, "b.py", ("triple",))], "#")


# ----------------------------------------------------------------------------- the real releases

# one release per distinct extracted file: 0.5.6 - 0.5.9 (torch decode, not offered), 0.5.10 - 0.5.12
OLD = ("0.5.6", "0.5.10")


def test_old_releases_are_described_by_their_backends():
    for v in ("0.5.6", "0.5.7", "0.5.8", "0.5.9", "0.5.10", "0.5.11", "0.5.12"):
        r = RELEASES[v]
        assert r.kernel_file is None and r.backends and set(r.api) | set(r.not_offered) == {
            "decode_metadata", "swa_spec_page_table", "num_kv_splits", "flashinfer_kv_indices",
            "flashmla_kv_indices", "chunked_prefix_kv_indices", "trtllm_mha_kv_indices", "pa_page_table",
            "trtllm_mha_graph_metadata", "aiter_ragged_page_table", "aiter_req_to_token_page_table"}
        # the KV-index kernels: FlashInfer's and FlashMLA's from the attention utils.py, the chunked
        # prefix's from forward_batch_info.py (0.5.6, 0.5.7) or the DeepSeek MHA mixin (0.5.8 on)
        kv = r.files["kv_indices.py"]
        forward_batch = "forward_batch_info.py" if v in ("0.5.6", "0.5.7") else "forward_batch_deepseek_mha_mixin.py"
        assert kv.member is None and kv.backends == (
            ("sglang/srt/layers/attention/utils.py",
             ("create_flashinfer_kv_indices_triton", "create_flashmla_kv_indices_triton")),
            (f"sglang/srt/model_executor/{forward_batch}", ("create_chunked_prefix_cache_kv_indices",)))
        assert kv.same_as == (None if v in ("0.5.6", "0.5.8") else "0.5.6" if v == "0.5.7" else "0.5.8")
        assert ("decode_metadata" in r.not_offered) == (v in ("0.5.6", "0.5.7", "0.5.8", "0.5.9"))
        assert variant_for_release("decode_metadata", v) == "default"
    assert release_entry("0.5.6.post2") is RELEASES["0.5.6"] and release_entry("0.5.12.post1") is RELEASES["0.5.12"]
    # the AITER page tables: 0.5.12 ships their file, loaded as it is (it imports triton alone); before it, none
    aiter = RELEASES["0.5.12"].files["aiter_unified_attention.py"]
    assert aiter.member == "sglang/srt/layers/attention/triton_ops/aiter_unified_attention.py" and not aiter.backends
    for v in ("0.5.6", "0.5.7", "0.5.8", "0.5.9", "0.5.10", "0.5.11"):
        assert "aiter_unified_attention.py" not in RELEASES[v].files and {
            "aiter_ragged_page_table", "aiter_req_to_token_page_table"} <= set(RELEASES[v].not_offered)


@pytest.mark.parametrize("version", OLD)
def test_each_old_release_loads_from_its_generated_file(version, device):
    t = release_target(version, device)
    r = RELEASES[version]
    assert set(t.bindings) == set(r.api)
    for op, b in t.bindings.items():
        assert b.by_name and b.generation == r.api[op] and t.variants[op] == "default", (op, b.describe())
    for op, why in r.not_offered.items():
        assert why in t.missing[op]
    for name in ("metadata.py", "kv_indices.py"):  # kv_indices.py: from utils.py (0.5.12's imports sglang.srt), mixin
        text = kernel_file(version, name).read_text()
        assert text.startswith(f"# Generated by kvfuzz (kvfuzz/targets/extract.py) from the wheel of sglang=={version}")
        assert "sha256" in text and "sgl_kernel" not in text and "import sglang" not in text


@pytest.mark.parametrize("version", OLD)
def test_old_releases_run_in_contract_cases_clean(version, device):
    t = release_target(version, device)
    todo = [cases.splits([1, 50, 4000, 99], num_group=2), cases.spec(la=(255, 256, 257), R=3, WB=4)]
    if t.supports("decode_metadata"):
        todo += list(DECODE_CASES.values())
    for case in todo:
        v = judge(in_contract(case, t), run_case(t, case, device))
        assert v.status == "in_contract" and v.findings == [], (case.op, v.signatures())


def test_0_5_10_has_0_5_14s_kernels_and_defect(device):
    """The extracted kernels are 0.5.14's text, so the known 0.5.14 defect is there too: writes
    to a non-contiguous swa_page_table go to a `.contiguous()` copy (docs/findings.md)."""
    ref = ast.parse(kernel_file("0.5.14").read_text())
    old = ast.parse(kernel_file("0.5.10").read_text())
    kernels = {n.name: ast.dump(n) for n in ref.body if isinstance(n, ast.FunctionDef) and n.name.startswith("_")}
    assert kernels and kernels == {n.name: ast.dump(n) for n in old.body if getattr(n, "name", None) in kernels}
    t = release_target("0.5.10", device)
    from kvfuzz.case import TensorSpec

    case = cases.decode(ps=16, swa=True, swa_table=TensorSpec("int32", (3, 7), (1, 3)))
    assert "decode_metadata:swa:mismatch:swa_page_table:all" in judge(case, run_case(t, case, device)).signatures()


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
@pytest.mark.interpreter
def test_fuzzing_an_op_a_release_does_not_offer_is_refused_in_one_line(tmp_path):
    kernel_file("0.5.6")
    p = subprocess.run([sys.executable, "-m", "kvfuzz.cli", "fuzz", "--target", "sglang==0.5.6", "--device", "cpu",
                        "--op", "decode_metadata", "--budget", "1", "--corpus", str(tmp_path / "c")],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "normal_decode_set_metadata is plain torch" in p.stderr


@pytest.mark.interpreter
def test_an_installed_old_sglang_is_extracted_from_its_backends(tmp_path):
    """`--target sglang` with 0.5.10 installed: its backend modules (here: 0.5.10's definitions and
    an import of a package that is not installed) are extracted into the cache, keyed by content."""
    body = kernel_file("0.5.10").read_text() + "\nfrom sgl_kernel import merge_state_v2\n"
    site = tmp_path / "site"
    attention = site / "sglang" / "srt" / "layers" / "attention"
    attention.mkdir(parents=True)
    for name in ("flashattention_backend.py", "triton_backend.py"):
        (attention / name).write_text(body)
    (site / "sglang" / "__init__.py").write_text("raise ImportError('kvfuzz must not import sglang')\n")
    dist = site / "sglang-0.5.10.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.10\n")
    code = textwrap.dedent("""
        import json, sys
        from kvfuzz.targets import load_target
        t = load_target("sglang", "cpu")
        print(json.dumps([t.release, sorted(t.bindings), t.variants["decode_metadata"],
                          "sgl_kernel" in sys.modules, str(t.module.__file__)]))
    """)
    env = dict(os.environ, KVFUZZ_CACHE=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    release, ops, variant, imported, path = json.loads(r.stdout.strip().splitlines()[-1])
    assert (release, ops, variant, imported) == (
        "0.5.10", ["decode_metadata", "num_kv_splits", "swa_spec_page_table"], "default", False)
    assert path.startswith(str(tmp_path / "cache" / "sglang-0.5.10-installed-"))
    assert "from the installed sglang 0.5.10" in open(path).read(300)


# ------------------------------------------------------------ an older kvfuzz's extracted kv_indices.py

UTILS = """\
import triton
import triton.language as tl
from sglang.srt.utils import is_cuda


@triton.jit
def create_flashinfer_kv_indices_triton(req_to_token_ptr, kv_indices_ptr):
    tl.store(kv_indices_ptr, tl.load(req_to_token_ptr))


@triton.jit
def create_flashmla_kv_indices_triton(req_to_token_ptr, kv_indices_ptr):
    tl.store(kv_indices_ptr, tl.load(req_to_token_ptr) // 64)
"""
MIXIN = """\
import triton
import triton.language as tl
from sglang.srt.model_executor.forward_batch_info import ForwardBatch


@triton.jit
def create_chunked_prefix_cache_kv_indices(req_to_token_ptr, chunk_kv_indices_ptr):
    tl.store(chunk_kv_indices_ptr, tl.load(req_to_token_ptr))
"""


def test_an_older_extracted_kv_indices_is_extracted_again(tmp_path, monkeypatch):
    """0.5.10's kv_indices.py as an older kvfuzz extracted it (FlashInfer's kernel alone) is
    extracted again from one more download, with every entry point RELEASES takes; offline the
    older file is kept (its entry point still loads). The wheel here is a small stand-in."""
    import zipfile

    from kvfuzz.targets import wheels

    kv = RELEASES["0.5.10"].files["kv_indices.py"]
    calls = []

    def fake(version, into, online=True):
        calls.append(version)
        if not fake.online:
            return "ERROR: No matching distribution found for sglang==0.5.10"
        whl = into / f"sglang-{version}-py3-none-any.whl"
        with zipfile.ZipFile(whl, "w") as z:
            z.writestr(kv.backends[0][0], UTILS)
            z.writestr(kv.backends[1][0], MIXIN)
        return whl

    fake.online = True
    monkeypatch.setenv("KVFUZZ_CACHE", str(tmp_path))
    monkeypatch.setattr(wheels, "_pip_download", fake)
    folder = tmp_path / "sglang-0.5.10"
    folder.mkdir()
    older = ("# Generated by kvfuzz (kvfuzz/targets/extract.py) from the wheel of sglang==0.5.10:\n"
             "# the entry points below and the module-level definitions they need, taken from\n"
             f"#   {kv.backends[0][0]} (sha256 {'0' * 64}): create_flashinfer_kv_indices_triton\n"
             "# without importing those modules.\n\nimport triton\n")
    (folder / "kv_indices.py").write_text(older)
    (folder / "metadata.py").write_text("# metadata.py, as cached\n")
    assert wheels.extracted_from(older) == ((kv.backends[0][0], ("create_flashinfer_kv_indices_triton",)),)
    fake.online = False
    assert wheels.sglang_kernel_file("0.5.10", "kv_indices.py").read_text() == older  # offline: kept
    fake.online = True
    path = wheels.sglang_kernel_file("0.5.10", "kv_indices.py")
    text = path.read_text()
    assert calls == ["0.5.10", "0.5.10"] and wheels.extracted_from(text) == kv.backends
    for entry in ("create_flashinfer_kv_indices_triton", "create_flashmla_kv_indices_triton",
                  "create_chunked_prefix_cache_kv_indices"):
        assert f"def {entry}(" in text
    assert "import sglang" not in text and "from sglang." not in text
    assert (folder / "metadata.py").read_text() == "# metadata.py, as cached\n"  # current: not rewritten
    assert wheels.sglang_kernel_file("0.5.10", "kv_indices.py") == path and len(calls) == 2  # current now


@pytest.mark.parametrize("stderr, message", [
    ("ERROR: Could not find a version that satisfies the requirement sglang==0.5.99 (from versions: 0.1.3, 0.5.22, 0.5.23)\n"
     "ERROR: No matching distribution found for sglang==0.5.99\n",
     "sglang==0.5.99: no such release on the package index (its newest is 0.5.23)"),
    ("ERROR: Could not find a version that satisfies the requirement sglang==0.5.99 (from versions: none)\n"
     "ERROR: No matching distribution found for sglang==0.5.99\n",
     "cannot fetch sglang==0.5.99 from PyPI (ERROR: No matching distribution found for sglang==0.5.99): copy"),
])
def test_a_release_the_index_does_not_have_is_named_as_such(tmp_path, monkeypatch, stderr, message):
    """pip listing the package's versions means the index answered: no cache folder to copy. With
    no versions listed (no network, a mirror without sglang) the copy advice stands."""
    import subprocess

    from kvfuzz.errors import TargetLoadError
    from kvfuzz.targets import wheels

    monkeypatch.setenv("KVFUZZ_CACHE", str(tmp_path))
    monkeypatch.setattr(wheels.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 1, stdout="", stderr=stderr))
    with pytest.raises(TargetLoadError) as err:
        wheels.sglang_kernel_file("0.5.99")
    assert message in str(err.value)
