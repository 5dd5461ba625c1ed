#!/usr/bin/env python3
"""A model of one BSP step's schedule on the links between hosts with host summing: what a step
costs when the link, not the cores, is the limit, for today's schedule and for the changes issue 40
weighs (the embedding's gradient in two parts, parameters pulled in the order forward needs them,
pushes sent by that order). It is arithmetic, not a measurement: it checks itself against the
measured rows of bench/RESULTS.md ("What the link and the schedule allow") and then answers for
the base and big models on 2 x 8 GPUs.

   bench/link_schedule.py            the calibration rows, the scaled rows and the 2 x 8 GPU rows

What it models (docs/architecture.md, "Across hosts"): H = 2 hosts, one server and one aggregator
on each, the layers spread over the shards (cluster.spread_layers), so each layer's gradient sum
sends half across the link and its updated parameters come back the same way. Both hosts do the
same, so one host's link is modelled, each direction carrying, one after the other, that host's
pushes to the other server and its server's answers to the other host's pulls. Forward takes the
first third of the compute step and backward the rest, each layer in proportion to its size (as
cluster.backend=EMULATED does). Messages leave in the order they are ready (a FIFO per link, as
one ZeroMQ connection each way), or by a priority where a variant says so: over the whole link,
or per connection (what cluster.send_window builds: the aggregator's sums and the server's
answers on two connections that take turns on the link, each ranked by the flat vector's order). Servers, aggregators
and the encryption take no time: the model says what the link and the schedule allow.
"""
import heapq
from dataclasses import dataclass


def layers(d, dff, vocab, n=6):
    """Parameter counts in forward order: the shared embedding, encoder and decoder layers."""
    attn = 4 * d * d + 4 * d
    ffn = 2 * d * dff + dff + d
    enc = attn + ffn + 4 * d
    dec = 2 * attn + ffn + 6 * d
    return [("E", vocab * d)] + [(f"enc{i}", enc) for i in range(n)] + [(f"dec{i}", dec) for i in range(n)]


@dataclass
class Variant:
    name: str
    split_embedding: bool = False  # the output projection's part pushed first, lookup rows last
    early_rows: bool = False       # rows the step's tokens touch are named up front: the others update early
    forward_waits: bool = False    # forward of layer k waits for layer k only (not the whole pull)
    priority: bool = False         # the link sends what the next forward needs first
    lookup_first: bool = False     # the embedding where the model uses it (step_time_lookup_first)
    chunks: int = 1                # ... its output projection's gradient in this many blocks
    # What cluster.send_window builds: each sender ranks its own queue (the aggregator's pushes
    # and the server's answers leave one host on two connections, which share the link chunk by
    # chunk in turn), by the flat vector's order, so the whole embedding first; and forward's
    # lookup waits for all of the embedding (no next batch's rows named apart).
    per_connection: bool = False
    # The next forward begins only once every push of the step has crossed (the worker waits for
    # its pushes' acknowledgements, WorkerLoop's finish_push, before its next step), as built.
    forward_after_pushes: bool = False
    # Each host's server holds every shard and applies both hosts' sums itself (replicated, as an
    # all-reduce does): a host sends its whole sum across, nothing comes back, so a layer crosses
    # once after backward instead of twice (its sum, then its answer). The same bytes each way.
    one_crossing: bool = False


VARIANTS = [
    Variant("today"),
    Variant("embedding in two parts", split_embedding=True),
    Variant("+ rows named up front", split_embedding=True, early_rows=True),
    Variant("+ per-layer forward", split_embedding=True, early_rows=True, forward_waits=True),
    Variant("+ forward-order priority", split_embedding=True, early_rows=True, forward_waits=True, priority=True),
    Variant("priority alone", priority=True),
    Variant("per-layer forward + priority", forward_waits=True, priority=True),
    # The embedding where the model uses it (step_time_lookup_first): from the split with rows named up front
    Variant("two parts + rows named, dE's product apart", lookup_first=True),
    Variant("+ dE pushed in 8 blocks", lookup_first=True, chunks=8),
    Variant("+ per-layer forward + priority, next batch's rows first", lookup_first=True, forward_waits=True,
            priority=True, chunks=8),
    Variant("per-layer forward + priority per connection, embedding first, after the pushes (built)",
            lookup_first=True, forward_waits=True, priority=True, chunks=8, per_connection=True,
            forward_after_pushes=True),
    Variant("the same, forward not waiting for the pushes", lookup_first=True, forward_waits=True, priority=True,
            chunks=8, per_connection=True),
    Variant("one ranked queue per link (sums and answers)", lookup_first=True, forward_waits=True, priority=True,
            chunks=8),
    Variant("one crossing: each host applies both sums", lookup_first=True, forward_waits=True, priority=True,
            chunks=8, one_crossing=True),
]


class Link:
    """One direction of a host's link (the other mirrors it): messages go out in chunks of at most
    `chunk` bytes, one chunk at a time, the earliest ready first (or the lowest `order` among the
    ready ones, with `priority`). A message's delivery may make new ones ready (`on_done`)."""

    def __init__(self, bytes_per_s, priority, chunk=4 << 20, per_connection=False):
        self.rate, self.priority, self.chunk = bytes_per_s, priority, chunk
        self.per_connection = per_connection  # pushes and pulls queue apart and take turns
        self.future = []  # (ready, sequence, order, bytes, key): not ready yet
        self.seq = 0

    def send(self, ready, nbytes, order, key):
        self.seq += 1
        heapq.heappush(self.future, (ready, self.seq, order, nbytes, key))

    def run(self, on_done):
        """Sends everything, including what deliveries make ready; returns {key: delivery time}."""
        done, t, turn = {}, 0.0, 0
        ready = {"push": [], "pull": []} if self.per_connection else {"": []}
        while self.future or any(ready.values()):
            while self.future and self.future[0][0] <= t:
                r, seq, order, nbytes, key = heapq.heappop(self.future)
                queue = ready[key[0] if self.per_connection else ""]
                heapq.heappush(queue, ((order if self.priority else 0, r, seq), nbytes, key))
            busy = [q for q in ready.values() if q]
            if not busy:
                t = self.future[0][0]
                continue
            queue = busy[turn % len(busy)]
            turn += 1
            rank, nbytes, key = heapq.heappop(queue)
            piece = min(nbytes, self.chunk)
            t += piece / self.rate
            if nbytes > piece:
                heapq.heappush(queue, (rank, nbytes - piece, key))
            else:
                done[key] = t
                on_done(key, t)
        return done


def step_time(sizes, compute_s, link_bytes_per_s, variant, rows_fraction=0.15, steps=6):
    """Seconds a step takes in steady state (the last of `steps` steps). `rows_fraction`: the share
    of the embedding's rows a step's tokens touch."""
    if variant.lookup_first:
        return step_time_lookup_first(sizes, compute_s, link_bytes_per_s, variant, rows_fraction, steps)
    total = sum(p for _, p in sizes)
    fwd_s, bwd_s = compute_s / 3, 2 * compute_s / 3
    index = {name: i for i, (name, _) in enumerate(sizes)}
    half = {name: 4 * p / 2 for name, p in sizes}  # the bytes of a layer that cross: the other shard's half
    have = {name: 0.0 for name, _ in sizes}  # when each layer's parameters are in for the next forward
    t, starts = 0.0, []
    for _ in range(steps):
        starts.append(t)
        if variant.forward_waits:  # layer by layer, in forward order (the embedding's lookup first)
            for name, p in sizes:
                t = max(t, have[name]) + fwd_s * p / total
        else:  # once the whole pull is in
            t = max([t] + list(have.values())) + fwd_s
        # Backward: last layer first, each for its share of the time; the embedding last, or its
        # output projection's part first and the lookup's rows last.
        ready, clock = {}, t
        names = [name for name, _ in reversed(sizes) if name != "E"]
        names = (["E"] + names) if variant.split_embedding else (names + ["E"])
        for name in names:
            clock += bwd_s * 2 * half[name] / (4 * total)
            ready[name] = clock
        link = Link(link_bytes_per_s, variant.priority)
        for name in names:
            link.send(ready[name], half[name], index[name], ("push", name))
        if variant.split_embedding:
            link.send(clock, rows_fraction * half["E"], 0, ("push", "E-rows"))
        got = {}

        def delivered(key, when):
            # A sum delivered is applied at once, and its parameters go back to the other host.
            got[key] = when
            kind, name = key
            if kind != "push":
                return
            if name not in ("E", "E-rows") or not variant.split_embedding:
                link.send(when, half[name], index[name], ("pull", name))
            elif variant.early_rows and name == "E":  # rows the step did not touch: dense part only
                link.send(when, (1 - rows_fraction) * half["E"], 0, ("pull", "E"))
            elif ("push", "E") in got and ("push", "E-rows") in got:  # both parts are in
                rows = rows_fraction * half["E"] if variant.early_rows else half["E"]
                link.send(when, rows, 0, ("pull", "E-rows" if variant.early_rows else "E"))

        done = link.run(delivered)
        for name in have:
            have[name] = done[("pull", name)]
        if variant.early_rows:
            have["E"] = max(have["E"], done[("pull", "E-rows")])
        t = clock
    return starts[-1] - starts[-2]



def step_time_lookup_first(sizes, compute_s, link_bytes_per_s, variant, rows_fraction, steps):
    """step_time with the embedding where the model uses it: forward's lookup (no time) at its start
    needs only the next batch's rows (`rows_fraction` of them, as many untouched by this step as the
    fraction says), the output projection at forward's end (the embedding's share of forward) all of
    them; backward begins with the output projection's two products, dE = dlogits^T y (its dense part
    of the embedding's gradient, in `variant.chunks` blocks of rows, each pushed when done) and then
    dy = dlogits E, each half the embedding's share (as cluster.backend=EMULATED releases it), and
    pushes the lookups' rows at its end. The embedding is pushed in two
    parts and its rows named up front; forward_waits and priority as the variant says."""
    total = sum(p for _, p in sizes)
    fwd_s, bwd_s = compute_s / 3, 2 * compute_s / 3
    k = variant.chunks
    e_bytes = 4 * sizes[0][1] / 2  # the embedding's bytes that cross
    layers_ = [(name, p) for name, p in sizes[1:]]
    index = {name: i + 1 for i, (name, _) in enumerate(layers_)}
    half = {name: 4 * p / 2 for name, p in layers_}
    sent = 2 if variant.one_crossing else 1  # a whole sum crosses, not the other server's half
    chunk_names = [f"E{c}" for c in range(k)]
    have = {name: 0.0 for name in list(half) + chunk_names + ["E-next", "E-rows"]}
    next_rows = rows_fraction * (1 - rows_fraction)  # the next batch's rows this step left untouched
    e_rank = len(sizes)  # the embedding's dense blocks and the rest of it: after the layers
    if variant.per_connection:  # the lookup waits for all of it, ranked first (its begin is 0)
        next_rows, e_rank = 1 - rows_fraction, 0
    t, starts = 0.0, []
    for _ in range(steps):
        starts.append(t)
        if variant.forward_waits:
            t = max(t, have["E-next"], have["E-rows"])  # the lookup
            for name, p in layers_:
                t = max(t, have[name]) + fwd_s * p / total
            for c in chunk_names:  # the output projection, block by block
                t = max(t, have[c]) + fwd_s * sizes[0][1] / k / total
        else:  # once the whole pull is in
            t = max([t] + list(have.values())) + fwd_s
        clock = t
        link = Link(link_bytes_per_s, variant.priority, per_connection=variant.per_connection)
        for c in reversed(chunk_names):  # dE = dlogits^T y: the first of the output projection's products
            clock += bwd_s * sizes[0][1] / 2 / k / total
            if variant.one_crossing:  # the next batch's rows of the block first, for its lookup
                link.send(clock, sent * next_rows * e_bytes / k, -1, ("push", "E-next-" + c))
                link.send(clock, sent * (1 - next_rows) * e_bytes / k, e_rank, ("push", c))
            else:
                link.send(clock, sent * e_bytes / k, e_rank, ("push", c))
        clock += bwd_s * sizes[0][1] / 2 / total  # dy = dlogits E
        for name, p in reversed(layers_):
            clock += bwd_s * p / total
            link.send(clock, sent * half[name], index[name], ("push", name))
        link.send(clock, sent * rows_fraction * e_bytes, 0, ("push", "E-rows"))
        got = set()

        def delivered(key, when):
            kind, name = key
            got.add(key)
            if kind != "push" or variant.one_crossing:  # one crossing: nothing comes back
                return
            if name in half:
                link.send(when, half[name], index[name], ("pull", name))
            elif name in chunk_names:  # its untouched rows: the next batch's first, the rest by forward order
                link.send(when, next_rows * e_bytes / k, min(e_rank, -1), ("pull", "E-next-" + name))
                link.send(when, (1 - rows_fraction - next_rows) * e_bytes / k, e_rank, ("pull", name))
            if all(("push", c) in got for c in chunk_names) and ("push", "E-rows") in got and \
                    ("pull", "E-rows") not in got:
                got.add(("pull", "E-rows"))
                link.send(when, rows_fraction * e_bytes, -1, ("pull", "E-rows"))

        done = link.run(delivered)
        if variant.one_crossing:  # a layer is in once the other host's sum is; the embedding once all of it is
            rows = done[("push", "E-rows")]
            have.update({name: done[("push", name)] for name in half})
            have.update({c: max(done[("push", c)], done[("push", "E-next-" + c)], rows) for c in chunk_names})
            have["E-next"] = max(done[("push", "E-next-" + c)] for c in chunk_names)
            # The rows this step touched: their lookup sum and dE's rows, which are in every block.
            have["E-rows"] = max([rows] + [have[c] for c in chunk_names])
            t = clock
            continue
        for name in have:
            if name != "E-next":
                have[name] = done[("pull", name)]
        have["E-next"] = max(done[("pull", "E-next-" + c)] for c in chunk_names)
        t = clock
        if variant.forward_after_pushes:
            t = max([t] + [when for (kind, _), when in done.items() if kind == "push"])
    return starts[-1] - starts[-2]


def main():
    print("Calibration: the scaled runs of bench/RESULTS.md (2 hosts, 1000 ms emulated steps, CURVE),")
    print("measured against the model's 'today'.\n")
    print("| model | link | measured step | model step |")
    print("|---|---|---|---|")
    scaled = {"d_model 256, 37,000 pieces": layers(256, 1024, 37000), "d_model 256, 8,000 pieces": layers(256, 1024, 8000)}
    measured = {("d_model 256, 37,000 pieces", 814e6): 1510, ("d_model 256, 37,000 pieces", 3255e6): 1211,
                ("d_model 256, 8,000 pieces", 519e6): 1268, ("d_model 256, 8,000 pieces", 2078e6): 1051}
    for (model, bits), ms in measured.items():
        s = step_time(scaled[model], 1.0, bits / 8, VARIANTS[0])
        print(f"| {model} | {bits / 1e6:.0f} Mbit/s | {ms} ms | {s * 1000:.0f} ms |")
    print("\nEfficiency (compute step / step) by schedule, the scaled runs (links at the base model's 2.5 and")
    print("10 Gbit/s equivalents) and the paper's models on 2 x 8 GPUs (one host's 8 workers summed first):\n")
    rows = [
        ("d_model 256, 37,000 pieces", scaled["d_model 256, 37,000 pieces"], 1.0, 814e6, "2.5 G equiv."),
        ("d_model 256, 37,000 pieces", scaled["d_model 256, 37,000 pieces"], 1.0, 3255e6, "10 G equiv."),
        ("d_model 256, 8,000 pieces", scaled["d_model 256, 8,000 pieces"], 1.0, 519e6, "2.5 G equiv."),
        ("d_model 256, 8,000 pieces", scaled["d_model 256, 8,000 pieces"], 1.0, 2078e6, "10 G equiv."),
    ]
    # Compute steps on an H100 (bench/RESULTS.md, issue 38: the base model's bare bf16 step, 16,000
    # target tokens; big by the same tokens at ~3.4x the FLOPs).
    for model, sizes, compute in (("base", layers(512, 2048, 37000), 0.072), ("big", layers(1024, 4096, 37000), 0.245)):
        for gbit in (25, 100):
            rows.append((model, sizes, compute, gbit * 1e9, f"{gbit} Gbit/s"))
    print("| model | MB | link | compute step | " + " | ".join(v.name for v in VARIANTS) + " |")
    print("|---|---|---|---|" + "---|" * len(VARIANTS))
    for model, sizes, compute, bits, label in rows:
        mb = 4 * sum(p for _, p in sizes) / 1e6
        eff = [compute / step_time(sizes, compute, bits / 8, v) for v in VARIANTS]
        print(f"| {model} | {mb:.0f} | {label} | {compute * 1000:.0f} ms | " + " | ".join(f"{e:.2f}" for e in eff) + " |")


if __name__ == "__main__":
    main()
