"""Solutions of 04_stale_is_prefilling: the one-line fix, Mamba's split, who reads what."""


def is_prefilling_fixed(num_computed, num_prompt, num_reqs, num_reqs_padded):
    # computed < prompt over the padded rows (stale counts and all), then #41873's line:
    # is_prefilling[num_reqs:] = False.
    flags = [num_computed[i] < num_prompt[i] for i in range(num_reqs_padded)]
    return flags[:num_reqs] + [False] * (num_reqs_padded - num_reqs)


def mamba_split(query_lens, is_prefilling, threshold):
    # Mamba passes treat_short_extends_as_decodes=False: a row is a prefill when its query is
    # longer than the threshold OR its is_prefilling flag is set. Decodes come first; the first
    # prefill ends them.
    if query_lens[0] > threshold:
        return 0, len(query_lens)
    flags = [q > threshold or p for q, p in zip(query_lens, is_prefilling)]
    if not any(flags):
        return len(query_lens), 0
    first = flags.index(True)
    return first, len(query_lens) - first


def rows_on_wrong_state(prev_buffer, own_slots, query_lens, is_prefilling):
    # Three conditions. (1) The FULL decode graph replays only if every live row decodes one token.
    # (2) Mamba's split ORs is_prefilling (padded rows' flags included): one flagged row and the
    # builder skips its buffer refresh. (3) Then the graph reads last step's buffer: a live row is
    # on the wrong state where that entry is not its own block.
    full_graph = all(q == 1 for q in query_lens)
    refresh_skipped = any(is_prefilling)
    if not (full_graph and refresh_skipped):
        return []
    return [i for i, own in enumerate(own_slots) if prev_buffer[i] != own]


def mask_padded_rows(is_prefilling, num_reqs):
    # Fix it yourself 04 (#41873): rows past num_reqs are CUDA-graph padding, whatever stale counts
    # say; the live rows keep their flag (a live chunked prompt is still a prefill).
    is_prefilling[num_reqs:] = False
    return is_prefilling
