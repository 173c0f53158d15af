"""How `kvfuzz replay` (show.py) and the short repro script (short_repro.py) present a
decode_metadata case: the input rows and cells an output is computed from, and the call."""

from __future__ import annotations

from ...case import Case
from ...show import at
from ..record import ShortCall


def related_rows(case: Case, rows: list[int]) -> dict[str, list[int]]:
    """For the output rows `rows`, the first-dimension indices of each input they are computed from."""
    v = case.values
    out = {name: rows for name in ("seq_lens", "req_pool_indices", "extend_seq_lens") if name in v}
    pool = v.get("req_pool_indices")
    if pool is not None:
        slots = sorted({int(pool[i]) for i in rows if 0 <= i < pool.shape[0]})
        out["req_to_token"] = slots
        if "swa_src_table" in v:
            out["swa_src_table"] = slots
    return out


def cell_sources(case: Case, tensor: str, index: list[int]) -> str | None:
    """The input cells a page-table cell reads, in words (draft_extend_metadata's too)."""
    if tensor not in ("page_table", "swa_page_table"):
        return None
    v, s = case.values, case.scalars
    i, c = index
    pool, rtt, ps = v["req_pool_indices"], v["req_to_token"], s["page_size"]
    if not 0 <= i < pool.shape[0]:
        return None
    slot = int(pool[i])
    parts = [f"req_pool_indices[{i}] = {slot}"]
    if s.get("src_is_read_table"):
        table = "req_to_token" if tensor == "page_table" else "swa_src_table"
        return ", ".join(parts + [f"{table}{at(v[table], slot, c)}"])
    parts.append(f"req_to_token{at(rtt, slot, c * ps)}")
    if "outside" in parts[-1]:
        return ", ".join(parts)
    token = int(rtt[slot, c * ps])
    if tensor == "page_table" and "full_v2p" in v:
        parts.append(f"full_v2p{at(v['full_v2p'], token // ps)}")
    if tensor == "swa_page_table":
        if "swa_v2p" in v:
            parts.append(f"swa_v2p{at(v['swa_v2p'], token // ps)}")
        elif "full_to_swa_index_mapping" in v:
            parts.append(f"full_to_swa_index_mapping{at(v['full_to_swa_index_mapping'], token)}")
    return ", ".join(parts)


def short_call(case: Case, entry: str) -> ShortCall:
    """Bound by name, as releases renamed and moved arguments."""
    from ...short_repro import wrap  # here: the records load in every worker, which never writes a script

    t, s = case.tensors, case.scalars
    names = ("cache_seqlens_int32", "cu_seqlens_k", "page_table", "req_to_token", "req_pool_indices",
             "strided_indices", "seq_lens")
    kw = [f"{n}={n}" for n in names] + [f"{n}={s[n]!r}" for n in ("max_seq_pages", "seq_len_delta", "page_size")]
    swa = "swa_page_table" in t and "full_to_swa_index_mapping" in t
    if swa:
        kw.append("swa_page_table=swa_page_table")
    kw += [f"{n}={n}" for n in ("full_v2p",) if n in t]
    kw += [f"{n}={s[n]!r}" for n in ("skip_page_table", "zero_tail", "kernel_page_multiplier", "src_is_read_table")
           if n in s]
    lines = ["args = dict(" + wrap(", ".join(kw), 12) + ")",
             f"params = inspect.signature({entry}).parameters",
             'if "strided_indices" not in params:  # SGLang 0.5.19 on',
             '    del args["strided_indices"]']
    if "full_v2p" in t:
        lines += ['if "v2p_page_table" in params:  # SGLang 0.5.17-0.5.18 name full_v2p so',
                  '    args["v2p_page_table"] = args.pop("full_v2p")']
    if swa:
        lines += ['if "full_to_swa_index_mapping" in params:  # SGLang 0.5.23 takes the mapping itself',
                  '    args["full_to_swa_index_mapping"] = full_to_swa_index_mapping',
                  "else:  # 0.5.13-0.5.22 an SWAKVPool holding it",
                  '    args["token_to_kv_pool"] = swa_pool(full_to_swa_index_mapping)']
    helpers = ("swa_pool",) if "full_to_swa_index_mapping" in t else ()
    return ShortCall(tuple(lines) + (f"{entry}(**args)",), imports=("inspect",), helpers=helpers)


def short_refuses(case: Case) -> str | None:
    """Why a short script cannot call the entry point for this case (None: it can)."""
    if {"swa_v2p", "swa_src_table"} & set(case.tensors):
        return "a short repro cannot build SGLang's unified SWA pool objects (swa_v2p, swa_src_table)"
    return None
