"""Hand-chosen cases for the tests: small, readable, one per kernel path and edge."""

from __future__ import annotations

import numpy as np

from kvfuzz.case import Case, TensorSpec

C = TensorSpec.contiguous


def decode(ps: int = 1, swa: bool = False, B: int = 3, P: int | None = None, delta: int = 0,
           dtype: str = "int64", page_table: TensorSpec | None = None, swa_table: TensorSpec | None = None,
           variant: str = "default") -> Case:
    lens = np.array([5, 17, 9, 1, 30, 2][:B]) * ps // max(ps // 4, 1)
    P = -(-(int(lens.max()) + delta) // ps) if P is None else P
    R, W = 4, max(P, 1) + 2
    T = max(P, 1) * ps + ps
    tensors = {"cache_seqlens_int32": C("int32", (B,)), "cu_seqlens_k": C("int32", (B + 1,)),
               "page_table": page_table or C("int32", (B, W)), "req_to_token": C(dtype, (R, T)),
               "req_pool_indices": C(dtype, (B,)), "strided_indices": C("int64", (-(-T // ps),)),
               "seq_lens": C(dtype, (B,))}
    rng = np.random.default_rng(7)
    values = {"req_to_token": rng.permutation(R * T).reshape(R, T), "req_pool_indices": (np.arange(B) * 3 + 1) % R,
              "strided_indices": np.arange(0, T, ps), "seq_lens": lens}
    if swa:
        tensors["swa_page_table"] = swa_table or C("int32", (B, W))
        tensors["full_to_swa_index_mapping"] = C("int64", (R * T,))
        values["full_to_swa_index_mapping"] = rng.integers(0, 1 << 20, size=R * T)
    return Case("decode_metadata", {"max_seq_pages": P, "seq_len_delta": delta, "page_size": ps}, tensors, values,
                variant=variant)


def spec(la=(3, 300), R: int = 2, WB: int = 2, extra: int = 0, dst: TensorSpec | None = None) -> Case:
    bs = len(la)
    M = bs * R
    lb = np.array([(m % (WB + 1)) for m in range(M)])
    WA = max(la)
    W = int(max(np.repeat(la, R) + lb)) + extra
    rng = np.random.default_rng(3)
    tensors = {"page_table_dst": dst or C("int32", (M, W)), "page_table_a": C("int32", (bs, WA)),
               "page_table_b": C("int32", (M, WB)), "seq_len_a": C("int32", (bs,)), "seq_len_b": C("int32", (M,))}
    values = {"page_table_a": rng.integers(0, 1 << 20, size=(bs, WA)), "page_table_b": -1 - rng.integers(0, 99, size=(M, WB)),
              "seq_len_a": np.array(la), "seq_len_b": lb}
    return Case("swa_spec_page_table", {"speculative_num_draft_tokens": R}, tensors, values)


def splits(lens, num_group: int = 1, num_head: int = 32, num_kv_head: int = 8, mks: int = 8, dcc: int = 132,
           dtype: str = "int32", variant: str = "default") -> Case:
    lens = np.asarray(lens)
    n = lens.size
    s = {"num_seq": n, "num_group": num_group, "num_head": num_head, "num_kv_head": num_kv_head,
         "max_kv_splits": mks, "device_core_count": dcc}
    return Case("num_kv_splits", s, {"num_kv_splits": C("int32", (n * num_group,)), "seq_lens": C(dtype, (n,))},
                {"seq_lens": lens}, variant=variant)


def draft_extend(ps: int = 1, swa: bool = False, lens=(5, 17, 0, 9), W: int | None = None, tpr: int = 3,
                 dtype: str = "int64", page_table: TensorSpec | None = None, swa_layouts: dict | None = None) -> Case:
    """draft_extend_set_metadata: row 2 a padding row (length 0) with a pool index past the table."""
    lens = np.asarray(lens)
    B = lens.size
    live = -(-lens // ps)
    W = int(live.max()) + 2 if W is None else W
    R, T = 4, max(int(min(live.max(), W)), 1) * ps + ps
    rng = np.random.default_rng(11)
    pool = (np.arange(B) * 3 + 1) % R
    pool[live == 0] = R  # never read: the row has no pages
    tensors = {"cache_seqlens_int32": C("int32", (B,)), "cu_seqlens_k": C("int32", (B + 1,)),
               "cu_seqlens_q": C("int32", (B + 1,)), "page_table": page_table or C("int32", (B, W)),
               "req_to_token": C(dtype, (R, T)), "req_pool_indices": C(dtype, (B,)), "seq_lens": C(dtype, (B,)),
               "extend_seq_lens": C("int32", (B,))}
    values = {"req_to_token": rng.permutation(R * T).reshape(R, T), "req_pool_indices": pool, "seq_lens": lens,
              "extend_seq_lens": (np.arange(B) * 2 + 1) % 4}
    if swa:
        N = R * T + 7
        tensors |= {"full_to_swa_index_mapping": C("int64", (N,)), "swa_page_table": tensors["page_table"],
                    "out_cache_loc": C("int64", (B * tpr,)), "swa_out_cache_loc": C("int64", (B * tpr,))}
        tensors |= swa_layouts or {}
        values |= {"full_to_swa_index_mapping": rng.integers(-5, 1 << 20, size=N),
                   "out_cache_loc": rng.integers(0, N, size=B * tpr)}
    return Case("draft_extend_metadata", {"page_size": ps}, tensors, values)


def topk(rows, K: int | None = None, spec: TensorSpec | None = None) -> Case:
    """q8kv8_topk_length_from_indices: `rows` as lists of indices (-1 pads), padded with -1 to K."""
    K = max(len(r) for r in rows) if K is None else K
    idx = np.array([list(r) + [-1] * (K - len(r)) for r in rows], dtype=np.int64).reshape(len(rows), K)
    return Case("q8kv8_topk_length", {}, {"indices": spec or C("int32", (len(rows), K)),
                                          "topk_length": C("int32", (len(rows),))}, {"indices": idx})


def v2p(n: int, kind: str = "permuted", seed: int = 11) -> np.ndarray:
    """A virtual -> physical page table of n entries: identity, a permutation, or with -1 tombstones."""
    rng = np.random.default_rng(seed)
    if kind == "identity":
        return np.arange(n)
    table = rng.permutation(3 * n)[:n]
    if kind == "tombstones":
        table[::3] = -1
    elif kind == "unbound":
        table[:] = -1
    return table


def unified(case: Case, full_v2p: np.ndarray | str | None = None, swa_v2p: np.ndarray | str | None = None,
            zero_tail: bool | None = None, skip: bool | None = None, variant: str = "strict") -> Case:
    """A `decode` case with SGLang 0.5.23's arguments: v2p tables (an array, or a kind for `v2p`
    sized to the case's virtual pages), `swa_v2p` in place of the SWA mapping, the two flags."""
    t, v, s = dict(case.tensors), dict(case.values), dict(case.scalars)
    pages = -(-int(v["req_to_token"].max() + 1) // s["page_size"])  # the virtual pages its tokens lie on
    for name, table in (("full_v2p", full_v2p), ("swa_v2p", swa_v2p)):
        if table is None:
            continue
        table = v2p(pages, table, seed=len(name)) if isinstance(table, str) else np.asarray(table)
        t[name], v[name] = C("int64", table.shape), table
    if swa_v2p is not None:
        del t["full_to_swa_index_mapping"], v["full_to_swa_index_mapping"]
    for name, on in (("zero_tail", zero_tail), ("skip_page_table", skip)):
        if on is not None:
            s[name] = on
    return Case(case.op, s, t, v, variant=variant)


def read_table(case: Case, variant: str = "read_table") -> Case:
    """A `decode` case as SGLang 0.5.19's unified pool passes it (`src_is_read_table=True`):
    req_to_token holds page ids; with SWA, `swa_src_table` (req_to_token's shape and layout)
    replaces the mapping."""
    t, v = dict(case.tensors), dict(case.values)
    if "full_to_swa_index_mapping" in t:
        del t["full_to_swa_index_mapping"], v["full_to_swa_index_mapping"]
        rtt = t["req_to_token"]
        t["swa_src_table"] = TensorSpec("int64", rtt.shape, rtt.strides, rtt.offset, rtt.storage_size)
        v["swa_src_table"] = np.random.default_rng(5).integers(-5, 1 << 20, size=rtt.shape)
    return Case(case.op, {**case.scalars, "src_is_read_table": True}, t, v, variant=variant)
