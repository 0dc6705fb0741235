#!/usr/bin/env python3
# Copyright: aic.stack contributors
# Apache-2.0
"""Run the KV-cache cliff ladder for ONE arm against an already deployed vLLM (+ LMCache) and append the results.

The arm's deployment (plan overrides from ``cliff_profiles.arm_plan_overrides``) is the caller's job; this only measures.
Each call appends rows to ``<results-dir>/cliff-results.csv`` and rebuilds the JSON, PNGs and HTML from every
row there, so running it once per arm into the same directory gives one comparative report.

    bench/cliff.py --profile cliff-kvd --arm nvme --vllm-url http://127.0.0.1:8000 \\
        --lmcache-url http://127.0.0.1:8080 --results-dir logs/cliff/results
    bench/cliff.py --profile cliff-spur-l2 --set iterations=1 --set concurrency=1,8 --dry-run
    bench/cliff.py --profile cliff-kvd --arm dram --target-url http://127.0.0.1:30000 \
        --vllm-url http://127.0.0.1:8000 --vllm-url http://127.0.0.1:8001 --results-dir logs/cliff/results

With --target-url (the job's router) the requests go through the router and the counters are summed over every
--vllm-url instance behind it.

An empty ``--set key=`` value means "keep the default" (never "empty").
"""

from __future__ import annotations

import argparse
import json
import os
import sys

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_COLLECTIONS = os.path.join(_REPO, ".collections")
if os.path.isdir(_COLLECTIONS) and _COLLECTIONS not in sys.path:
    sys.path.insert(0, _COLLECTIONS)

from ansible_collections.aic.stack.plugins.plugin_utils.cliff import profiles as cliff_profiles  # noqa: E402
from ansible_collections.aic.stack.plugins.plugin_utils.cliff import prompts as cliff_prompts  # noqa: E402
from ansible_collections.aic.stack.plugins.plugin_utils.cliff import results as cliff_results  # noqa: E402
from ansible_collections.aic.stack.plugins.plugin_utils.cliff import runner as cliff_runner  # noqa: E402


def parse_sets(pairs):
    overrides = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise cliff_profiles.CliffConfigError(f"--set {pair!r}: expected key=value")
        overrides[key.strip()] = value
    return overrides


def served_model(vllm_url, timeout=30.0):
    import requests

    resp = requests.get(vllm_url.rstrip("/") + "/v1/models", timeout=timeout)
    resp.raise_for_status()
    return resp.json()["data"][0]["id"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cliff_kvd", help="built-in or --profiles-file profile name")
    ap.add_argument("--profiles-file", help="JSON file {name: {key: value}} of user profiles (merged over built-ins)")
    ap.add_argument("--set", action="append", metavar="KEY=VALUE", help="profile override; repeatable")
    ap.add_argument(
        "--arm", default=os.environ.get("AIC_CLIFF_ARM", ""), help=f"one of {', '.join(cliff_profiles.ARMS)}"
    )
    ap.add_argument(
        "--vllm-url",
        action="append",
        help="a vLLM instance whose counters are read (repeat for every instance behind --target-url); default "
        "http://127.0.0.1:8000",
    )
    ap.add_argument(
        "--target-url",
        default="",
        help="where the requests go: the job's router (vllm-router) in front of the --vllm-url instances; "
        "default the first --vllm-url",
    )
    ap.add_argument("--lmcache-url", default="http://127.0.0.1:8080", help="LMCache HTTP port (serves /metrics)")
    ap.add_argument("--model", default="", help="served model name (default: the first of GET /v1/models)")
    ap.add_argument("--results-dir", default="results/cliff")
    ap.add_argument("--dry-run", action="store_true", help="print the resolved profile and arm overrides, run nothing")
    args = ap.parse_args(argv)

    try:
        user_profiles = None
        if args.profiles_file:
            with open(args.profiles_file, encoding="utf-8") as fh:
                user_profiles = json.load(fh)
        profile = cliff_profiles.resolve_profile(args.profile, parse_sets(args.set), user_profiles)
        arms = cliff_profiles.parse_arms(args.arm, key="--arm") if args.arm.strip() else profile["arms"]
        if len(arms) != 1 and not args.dry_run:
            raise cliff_profiles.CliffConfigError("--arm: name exactly one arm; the caller deploys each arm in turn")
    except (cliff_profiles.CliffConfigError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    if args.dry_run:
        doc = {
            "profile": profile,
            "arms": {
                arm: {
                    "lmcache": cliff_profiles.arm_uses_lmcache(arm),
                    "plan_overrides": cliff_profiles.arm_plan_overrides(profile, arm),
                }
                for arm in arms
            },
        }
        print(json.dumps(doc, indent=2))
        return 0

    arm = arms[0]
    vllm_urls = args.vllm_url or ["http://127.0.0.1:8000"]
    model = args.model or served_model(vllm_urls[0])
    encode = cliff_prompts.vllm_tokenizer(vllm_urls[0], model)
    rows = cliff_runner.run_arm(
        profile, arm, vllm_urls, model, encode, lmcache_url=args.lmcache_url, target_url=args.target_url or None
    )
    os.makedirs(args.results_dir, exist_ok=True)
    cliff_results.append_csv(os.path.join(args.results_dir, cliff_results.CSV_NAME), rows)
    paths = cliff_results.write_report(args.results_dir, profile=profile)
    with open(paths["json"], encoding="utf-8") as fh:
        cliffs = json.load(fh)["cliffs"]
    print(json.dumps({"arm": arm, "cliff": cliffs.get(arm), "files": paths}, indent=2))
    return 1 if any(r["err_count"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
