"""test_serve_script.py: the server with the diagnostic scripted runner (tests/python/
serve_script.json) behind the same engine, so outputs are known: a DSML tool-call round trip
(non-stream and streamed tool-call deltas, then the tool result and the final answer) with the
official openai package, reasoning_content sent back in history, stop strings with held-back
partial matches and their stop_reason, max_tokens, malformed DSML passed through as text, text
after an EOS or a closed tool-call block, and the raw SSE framing with curl.
Usage: python3 tests/python/test_serve_script.py [--bin build/dsv4]"""
import json
import os
import subprocess
import sys

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import SCRIPT, Server, check, metric, run_tests, wait_idle  # noqa: E402

MODEL = "dsv4-demo"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather forecast for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
NO_THINKING = {"chat_template_kwargs": {"thinking": False}}


def main():
    with Server("--diagnostic-script", SCRIPT) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=60)

        def tool_call_round_trip():
            r = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS)
            c = r.choices[0]
            check(c.finish_reason == "tool_calls", c)
            check(c.message.content == "Let me check.", c.message)
            check(c.message.model_extra["reasoning_content"] == "The user wants the weather, so I call the tool.")
            check(len(c.message.tool_calls) == 1, c.message)
            call = c.message.tool_calls[0]
            check(call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_"))
            check(json.loads(call.function.arguments) == {"city": "Paris", "days": 3}, call.function.arguments)
            check(r.usage.completion_tokens_details.reasoning_tokens > 5, r.usage)
            # Turn 2: the assistant turn (with its reasoning, as DeepSeek requires) and the tool result.
            history = ASK + [
                {"role": "assistant", "content": c.message.content, "tool_calls": [call.model_dump()],
                 "reasoning_content": c.message.model_extra["reasoning_content"]},
                {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"forecast": "sunny"})}]
            r2 = client.chat.completions.create(model=MODEL, messages=history, tools=TOOLS)
            check(r2.choices[0].finish_reason == "stop", r2)
            check(r2.choices[0].message.content == "It is sunny in Paris for the next 3 days.", r2)
            check(not r2.choices[0].message.tool_calls)
            # The prompt really carried the history: reasoning, DSML call and the tool result.
            st, _, body = srv.request("POST", "/tokenize", {"messages": history, "tools": TOOLS,
                                                            "return_token_strs": False})
            ids = json.loads(body)["tokens"]
            _, _, text = srv.request("POST", "/detokenize", {"tokens": ids})
            prompt = json.loads(text)["prompt"]
            for piece in ("so I call the tool.", '<｜DSML｜invoke name="get_weather">', "<tool_result>",
                          '"name": "get_weather"'):
                check(piece in prompt, (piece, prompt[-600:]))

        def streamed_tool_call_deltas():
            stream = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, stream=True,
                                                    stream_options={"include_usage": True})
            reasoning, content, calls, finish, usage = "", "", {}, None, None
            for chunk in stream:
                if chunk.usage:
                    usage = chunk.usage
                if not chunk.choices:
                    continue
                d = chunk.choices[0].delta
                reasoning += d.model_extra.get("reasoning_content") or ""
                content += d.content or ""
                for tc in d.tool_calls or []:
                    entry = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                    entry["id"] += tc.id or ""
                    if tc.function:
                        entry["name"] += tc.function.name or ""
                        entry["arguments"] += tc.function.arguments or ""
                finish = chunk.choices[0].finish_reason or finish
            check(finish == "tool_calls", finish)
            check(reasoning == "The user wants the weather, so I call the tool." and content == "Let me check.")
            check(list(calls) == [0] and calls[0]["name"] == "get_weather" and calls[0]["id"].startswith("call_"))
            check(json.loads(calls[0]["arguments"]) == {"city": "Paris", "days": 3}, calls)
            check(usage is not None and usage.completion_tokens_details.reasoning_tokens > 5, usage)

        def stop_strings():
            for stream in (False, True):
                for stop, want in ((["STOP"], "one two three four five "), ("ve ST", "one two three four fi"),
                                   (["never", "three"], "one two ")):
                    kw = dict(model=MODEL, messages=[{"role": "user", "content": "count to ten"}], stop=stop,
                              extra_body=NO_THINKING)
                    if stream:
                        pieces = [c.choices[0].delta.content or "" for c in
                                  client.chat.completions.create(stream=True, **kw) if c.choices]
                        text = "".join(pieces)
                        first = stop if isinstance(stop, str) else stop[0]
                        check(not any(first[:2] in p for p in pieces if first[:2] not in want), pieces)
                    else:
                        r = client.chat.completions.create(**kw)
                        text = r.choices[0].message.content
                        check(r.choices[0].finish_reason == "stop", r)
                    check(text == want, (stream, stop, text))
            # stop_reason is the stop string even when it reads like a stop token's ("token:abc") or
            # EOS's ("eos"); "token:abc" used to crash the server (std::stoi) when streaming.
            for stop, want in (("token:abc", "status eos then "), ("eos", "status ")):
                kw = dict(model=MODEL, messages=[{"role": "user", "content": "read the log"}], stop=[stop],
                          extra_body=NO_THINKING)
                r = client.chat.completions.create(**kw)
                check(r.choices[0].message.content == want and r.choices[0].model_extra["stop_reason"] == stop, r)
                last = list(client.chat.completions.create(stream=True, **kw))[-1].choices[0]
                check(last.finish_reason == "stop" and last.model_extra["stop_reason"] == stop, last)
                c = client.completions.create(model=MODEL, prompt="read the log", stop=[stop])
                check(c.choices[0].text == want and c.choices[0].model_extra["stop_reason"] == stop, c)
            # A stop string that never completes is released at the end.
            r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "count to ten"}],
                                               stop=["ten!"], extra_body=NO_THINKING)
            check(r.choices[0].message.content == "one two three four five STOP six seven eight nine ten", r)

        def max_tokens():
            r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "count to ten"}],
                                               max_tokens=3, extra_body=NO_THINKING)
            check(r.choices[0].message.content == "one two three" and r.choices[0].finish_reason == "length", r)
            check(r.usage.completion_tokens == 3)

        def malformed_dsml_passes_through():
            r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "broken tools"}],
                                               tools=TOOLS)
            m = r.choices[0].message
            check(not m.tool_calls and r.choices[0].finish_reason == "stop", r)
            check(m.content.startswith("Sure.\n\n<｜DSML｜tool_calls>") and m.content.endswith("oops"), m.content)

        def text_after_eos_or_tools():
            # Both answers must not depend on streaming. With ignore_eos and special tokens kept, the
            # EOS and what follows it are content, once (they used to repeat the text before them).
            def both(prompt, **kw):
                kw = dict(model=MODEL, messages=[{"role": "user", "content": prompt}], **kw)
                r = client.chat.completions.create(**kw)
                content, calls = "", {}
                for c in client.chat.completions.create(stream=True, **kw):
                    content += c.choices[0].delta.content or ""
                    for tc in c.choices[0].delta.tool_calls or []:
                        calls[tc.index] = calls.get(tc.index, "") + (tc.function.arguments or "")
                check(content == (r.choices[0].message.content or ""), (content, r))
                check(list(calls.values()) == [t.function.arguments for t in r.choices[0].message.tool_calls or []])
                return r
            r = both("text after eos", max_tokens=3, extra_body={**NO_THINKING, "ignore_eos": True,
                                                                 "skip_special_tokens": False})
            check(r.choices[0].message.content == "abc<｜end▁of▁sentence｜>def", r)
            # After a closed block whose calls were delivered, stray text is dropped (logged), all of
            # it (later pieces used to leak through as content).
            r = both("text after tools", tools=TOOLS, extra_body=NO_THINKING)
            check(r.choices[0].message.content == "Calling." and len(r.choices[0].message.tool_calls) == 1, r)
            check(r.choices[0].finish_reason == "tool_calls", r)

        def raw_sse_with_curl():
            out = subprocess.run(["curl", "-sN", srv.url + "/v1/chat/completions", "-H",
                                  "Content-Type: application/json", "-d",
                                  json.dumps({"messages": ASK, "tools": TOOLS, "stream": True,
                                              "stream_options": {"include_usage": True}})],
                                 capture_output=True, text=True, check=True).stdout
            events = [e for e in out.split("\n\n") if e]
            check(all(e.startswith("data: ") and "\n" not in e for e in events), out[:300])
            check(events[-1] == "data: [DONE]", events[-1])
            usage = json.loads(events[-2][6:])
            check(usage["choices"] == [] and usage["usage"]["completion_tokens"] > 0, usage)
            chunks = [json.loads(e[6:]) for e in events[:-2]]
            check(all(c["object"] == "chat.completion.chunk" and c["usage"] is None for c in chunks))
            check(len({c["id"] for c in chunks}) == 1)
            check(chunks[-1]["choices"][0]["finish_reason"] == "tool_calls", chunks[-1])
            # Non-stream with curl too.
            out = subprocess.run(["curl", "-s", srv.url + "/v1/chat/completions", "-H",
                                  "Content-Type: application/json", "-d",
                                  json.dumps({"messages": [{"role": "user", "content": "hello"}]})],
                                 capture_output=True, text=True, check=True).stdout
            j = json.loads(out)
            check(j["choices"][0]["message"]["content"] == "Hello from the script.", j)
            check(j["choices"][0]["message"]["reasoning_content"] == "A scripted thought.", j)

        def idle_after():
            ms = wait_idle(srv)
            check(metric(ms, "dsv4:kv_blocks_free") == metric(ms, "dsv4:kv_blocks_total"))
            check(metric(ms, "vllm:request_success_total", finished_reason="error") == 0)

        run_tests([("tool call round trip", tool_call_round_trip),
                   ("streamed tool-call deltas", streamed_tool_call_deltas), ("stop strings", stop_strings),
                   ("max_tokens", max_tokens), ("malformed DSML passes through", malformed_dsml_passes_through),
                   ("text after EOS or a tool-call block", text_after_eos_or_tools),
                   ("raw SSE with curl", raw_sse_with_curl), ("idle afterwards", idle_after)])
    print("test_serve_script: all passed")


if __name__ == "__main__":
    main()
