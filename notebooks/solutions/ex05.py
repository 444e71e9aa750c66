"""Solutions of 05_bug_hunt: the planted padding bug and the one-at-a-time shrinker."""


def pad_tail(slots, num_reqs):
    # The tempting variant: give every padded row the last live row's slot (a "real" slot, so the
    # kernel needs no null check). Nothing live before? Then the null block.
    fill = slots[num_reqs - 1] if num_reqs else 0
    return slots[:num_reqs] + [fill] * (len(slots) - num_reqs)


def shrink_list(items, fails):
    # Try each single removal from the left; keep the first that still fails and start over.
    # Stop when no single removal fails: every remaining item is needed.
    cur = list(items)
    i = 0
    while i < len(cur):
        smaller = cur[:i] + cur[i + 1:]
        if fails(smaller):
            cur, i = smaller, 0
        else:
            i += 1
    return cur
