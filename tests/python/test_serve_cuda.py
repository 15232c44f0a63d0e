"""test_serve_cuda.py: the serving end to end against the CUDA runner. Runs only on a GPU machine,
given the model: `python3 tests/python/test_serve_cuda.py --bin build/dsv4 --serve-args "--device cuda
--model DIR"` (DIR: a W4A16 checkpoint with the DeepSeek-V4 tokenizer, e.g. `dsv4 make-model --preset
flash-shaped --layers 2 --layer-types csa,hca --tokenizer third_party/tokenizer/tokenizer.json`).
Without --serve-args it reports itself skipped (CI has no GPU). Checks chat and completions, streamed
and not, greedy determinism, seeded sampling, logprobs, n choices, logit_bias and penalties, 16 concurrent streams in shared batches, a
client that hangs up mid-stream, and that every KV block is free afterwards."""
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Server, check, metric, run_tests, wait_idle  # noqa: E402

USER = [{"role": "user", "content": "Write one sentence about the sea."}]


def main():
    if "--serve-args" not in sys.argv:
        print("test_serve_cuda: skipped (needs a GPU and --serve-args \"--device cuda --model DIR\")")
        return
    import openai

    with Server("--max-num-seqs", "16", "--max-num-batched-tokens", "512", ready_timeout=600) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="none")
        model = client.models.list().data[0].id

        def basic():
            r = client.chat.completions.create(model=model, messages=USER, max_tokens=8)
            check(r.choices[0].finish_reason in ("length", "stop"), r)
            check(r.usage.completion_tokens >= 1 and r.usage.prompt_tokens > 5, r.usage)
            chunks = list(client.chat.completions.create(model=model, messages=USER, max_tokens=6, stream=True,
                                                         stream_options={"include_usage": True}))
            check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 1, chunks[-1])

        def greedy_and_seeded():
            a = client.completions.create(model=model, prompt="Once upon a time", max_tokens=8, temperature=0)
            b = client.completions.create(model=model, prompt="Once upon a time", max_tokens=8, temperature=0)
            check(a.choices[0].text == b.choices[0].text, (a.choices[0].text, b.choices[0].text))
            s1 = client.completions.create(model=model, prompt="Hi", max_tokens=8, seed=123, temperature=1.0)
            s2 = client.completions.create(model=model, prompt="Hi", max_tokens=8, seed=123, temperature=1.0)
            check(s1.choices[0].text == s2.choices[0].text, (s1.choices[0].text, s2.choices[0].text))
            r = client.chat.completions.create(model=model, messages=USER, max_tokens=4, logprobs=True, top_logprobs=3)
            lp = r.choices[0].logprobs.content
            check(len(lp) >= 1 and len(lp[0].top_logprobs) == 3 and lp[0].logprob <= 0.0, lp)

        def concurrent():
            def one(i):
                text = "".join(c.choices[0].text for c in client.completions.create(
                    model=model, prompt=f"Story number {i}:", max_tokens=12, temperature=0.8, seed=i, stream=True)
                    if c.choices)
                return len(text)
            with ThreadPoolExecutor(16) as pool:
                lengths = list(pool.map(one, range(16)))
            check(all(n > 0 for n in lengths), lengths)
            # Alone and inside a batch, a seeded request draws the same tokens.
            alone = client.completions.create(model=model, prompt="Story number 3:", max_tokens=12, temperature=0.8,
                                              seed=3)
            check(len(alone.choices[0].text) > 0)

        def choices_bias_penalties():
            # n choices: indexed, usage summed, and the same request twice gives the same choices (the
            # GPU's results depend on the batch's shape, so unlike on the CPU a choice need not equal
            # the single answer of its seed). A +100 bias forces its token; with +100 biases on three
            # tokens and penalties, only those three are generated.
            forked0 = metric(srv.metrics(), "dsv4:forked_prompt_tokens_total")
            a = client.completions.create(model=model, prompt="Hi", max_tokens=6, seed=77, temperature=1.0, n=2)
            forked = metric(srv.metrics(), "dsv4:forked_prompt_tokens_total") - forked0
            check(forked == a.usage.prompt_tokens - 1, (forked, a.usage))  # choice 1 copied the prompt's state
            b = client.completions.create(model=model, prompt="Hi", max_tokens=6, seed=77, temperature=1.0, n=2)
            check([c.index for c in a.choices] == [0, 1] and a.usage.completion_tokens == 12, a)
            check([c.text for c in a.choices] == [c.text for c in b.choices], (a, b))
            ids = json.loads(srv.request("POST", "/tokenize", {"prompt": " apple banana cherry"})[2])["tokens"]
            r = client.completions.create(model=model, prompt="Hi", max_tokens=4, temperature=0, logprobs=1,
                                          logit_bias={str(ids[0]): 100}, extra_body={"ignore_eos": True})
            check(r.choices[0].logprobs.tokens == [" apple"] * 4, r.choices[0])
            r = client.completions.create(model=model, prompt="Hi", max_tokens=6, temperature=0, presence_penalty=2,
                                          frequency_penalty=2, logit_bias={str(i): 100 for i in ids}, logprobs=1,
                                          extra_body={"ignore_eos": True, "repetition_penalty": 1.5})
            check(set(r.choices[0].logprobs.tokens) <= {" apple", " banana", " cherry"}, r.choices[0])

        def hang_up():
            stream = client.completions.create(model=model, prompt="Count slowly:", max_tokens=200, stream=True)
            for i, _ in enumerate(stream):
                if i == 3:
                    break
            stream.close()
            ms = wait_idle(srv, timeout=60)
            check(metric(ms, "dsv4:kv_blocks_free") == metric(ms, "dsv4:kv_blocks_total"))

        run_tests([("chat and streaming", basic), ("greedy, seeded, logprobs", greedy_and_seeded),
                   ("16 concurrent streams", concurrent), ("n choices, logit_bias, penalties", choices_bias_penalties),
                   ("client hang-up frees blocks", hang_up)])
        print(srv.output()[-1500:])


if __name__ == "__main__":
    main()
