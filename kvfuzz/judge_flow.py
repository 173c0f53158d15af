"""Which checks judge one case's runs, in which order: the control flow kvfuzz.judge (NumPy
arenas) and the repro script (torch arenas) share. The script embeds this module, so it
imports nothing.

The contract's status and how the first run ended decide the checks:
- "invalid_accepted": a must-refuse case that ran;
- "lost": the run was lost (its process died or hung, or it faulted the device): a crash in
  contract or not, never a refusal; "raised": an in-contract case that raised (a crash);
- with the arena read back: "memory" (bytes outside every tensor's elements, input elements),
  then "outputs" (an in-contract case that ran: the output rules) or "unchanged_outputs" (a
  must-refuse case that raised: it must have raised before writing), then "reruns" (the runs
  after the first against it: rules.rerun_rules).
"""


def judge_steps(status, raised, lost, arena_left):
    """The checks, in order, that judge a case of contract `status` ("in_contract",
    "out_of_contract", "must_refuse") whose first run `raised` (or was `lost`), and left an
    arena to read back (`arena_left`)."""
    steps = []
    if status == "must_refuse" and not raised and not lost:
        steps.append("invalid_accepted")
    if lost:
        steps.append("lost")
    elif status == "in_contract" and raised:
        steps.append("raised")
    if not arena_left:
        return steps
    steps.append("memory")
    if status == "in_contract" and not raised and not lost:
        steps.append("outputs")
    elif status == "must_refuse" and raised:
        steps.append("unchanged_outputs")
    steps.append("reruns")
    return steps
