# Copyright: aic.stack contributors
# Apache-2.0
"""The KV-cache "cliff" benchmark: profiles, prompts, bursts, drain waits, hit rates, cliff finder, reports.

Pure Python (stdlib + ``requests`` + ``prometheus_client``; ``matplotlib`` only for the PNG plots). Nothing here
deploys anything: an *arm* (``vram``, ``dram``, ``nvme``) is a set of plan overrides that the caller applies
before running the concurrency ladder for it (``bench/cliff.py --arm NAME``).

Load pattern (as upstream ``run_cliff.py``): each iteration is one **burst** of ``c`` simultaneous
non-streaming ``POST /v1/completions`` with ``max_tokens=1`` and temperature 0, i.e. prefill only; request
latency is roughly TTFT. In ``per_client`` mode every client has its own prefix, so the KV working set grows
with ``c`` and eventually spills out of VRAM, then DRAM (L1), then reaches L2: the "cliff".

Default vs user-set is explicit: an empty string or None override means "use the default", never "empty"
(upstream's Makefile turned empty/unset knobs into silently mis-sized pools and measured a fake cliff).

Modules, one concern each: ``profiles``, ``prompts``, ``drain``, ``counters``, ``burst``, ``finder``, ``results``, ``runner``. Controller-side code (the
benchmark runs on the controller or in a Slurm job, never as a module on a node), hence plugin_utils.
"""
