"""Solutions of 02_stale_rows: what a commit copies, what a dummy batch touches."""


def device_after_commit(cpu, device, n):
    # commit_block_table(n) copies rows [:n] of the CPU mirror; rows past n keep the device's old ids.
    return [list(r) for r in cpu[:n]] + [list(r) for r in device[n:]]


def dummy_blocks(device, n):
    # A dummy batch of n rows reads and writes block_table[row, 0] of the *device* copy
    # (no null fill: num_reqs == num_reqs_padded). Block 0 is the harmless null block.
    return sorted({row[0] for row in device[:n]} - {0})


def cpu_column0(ops, buggy):
    # Replay the operations on a 4-row table. A new request takes the lowest free row and the
    # lowest free block (blocks are handed out 1, 2, 3, ... and a freed block goes to the back
    # of the free queue). A finished request's row keeps its block unless clear_row runs (fixed).
    rows = [0, 0, 0, 0]
    where = {}
    holes = []
    free = list(range(1, 8))
    for op in ops:
        verb, rid = op.split()
        if verb == "add":
            row = min(holes) if holes else len(where)
            if holes:
                holes.remove(row)
            rows[row] = free.pop(0)
            where[rid] = row
        else:
            row = where.pop(rid)
            holes.append(row)
            free.append(rows[row])
            if not buggy:
                rows[row] = 0
    return rows


def clear_row(table, row):
    # Fix it yourself 02, half 1 (InputBatch.remove_request -> BlockTable.clear_row): the CPU
    # mirror's used entries become the null block and the row holds no blocks any more.
    n = int(table.num_blocks_per_row[row])
    table.block_table.np[row, :n] = 0
    table.num_blocks_per_row[row] = 0


def dummy_run_commit(block_table, num_reqs):
    # Half 2 (_dummy_run): the dummy rows read the device copy, so copy the CPU rows they use
    # (num_reqs == num_reqs_padded in a dummy batch) to the device, cleared rows included.
    block_table.commit_block_table(num_reqs)
