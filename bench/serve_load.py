#!/usr/bin/env python3
"""Load on an OpenAI-compatible server (mkserve): N streams, each sending streamed completions one
after another, and what they got: tokens/s per stream and in all, time to first token.

Usage: bench/serve_load.py URL --streams N [--requests R] [--max-tokens M] [--prompt-tokens P] [--key K]
Prompts are token ids (random, fixed seed), so no tokenizer sits between the load and the steps.
Standard library only."""
import argparse
import json
import random
import statistics
import threading
import time
import urllib.request


def one(url, key, prompt, max_tokens):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
    start = time.perf_counter()
    first = None
    tokens = 0
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            elif first is None:
                first = time.perf_counter()
    end = time.perf_counter()
    return {"ttft": (first or end) - start, "tokens": tokens, "decode": end - (first or end), "total": end - start}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url")
    ap.add_argument("--streams", type=int, required=True)
    ap.add_argument("--requests", type=int, default=2, help="requests each stream sends, one after another")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=128000, help="prompt ids are drawn below this")
    ap.add_argument("--key", default="none")
    a = ap.parse_args()
    rng = random.Random(1)
    results, errors = [], []
    lock = threading.Lock()

    def stream(i):
        for _ in range(a.requests):
            prompt = [rng.randrange(a.vocab) for _ in range(a.prompt_tokens)]
            try:
                r = one(a.url, a.key, prompt, a.max_tokens)
                with lock:
                    results.append(r)
            except Exception as e:  # noqa: BLE001 - reported, and the run fails
                with lock:
                    errors.append(str(e))

    start = time.perf_counter()
    threads = [threading.Thread(target=stream, args=(i,)) for i in range(a.streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    if errors or not results:
        print(f"serve_load: {len(errors)} requests failed: {errors[:3]}")
        raise SystemExit(1)
    per_stream = [(r["tokens"] - 1) / r["decode"] for r in results if r["tokens"] > 1 and r["decode"] > 0]
    total = sum(r["tokens"] for r in results)
    print(f"{a.streams} streams x {a.requests} requests, {a.prompt_tokens} prompt tokens, {a.max_tokens} max tokens: "
          f"{statistics.median(per_stream):.1f} tokens/s per stream (median), {total / wall:.1f} tokens/s in all, "
          f"time to first token {statistics.median(r['ttft'] for r in results) * 1e3:.1f} ms (median); "
          f"{total} tokens in {wall:.2f} s")


if __name__ == "__main__":
    main()
