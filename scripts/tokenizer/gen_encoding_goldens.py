#!/usr/bin/env python3
"""Writes tests/data/tokenizer/encoding_goldens.json: DeepSeek-V4 prompt strings produced by
DeepSeek's own reference encoder (encoding_dsv4.py) for the conversations below, plus their HF
token ids. The encoder is not part of this repository: pass the path of a copy of the official
file (e.g. from the DeepSeek-V4 model repository, encoding/encoding_dsv4.py); it is imported and
run as is.

    python3 scripts/tokenizer/gen_encoding_goldens.py --official /tmp/dsv4_official/encoding_dsv4.py \
        --tokenizer third_party/tokenizer/tokenizer.json --out tests/data/tokenizer/encoding_goldens.json
"""
import argparse
import importlib.util
import json

from tokenizers import Tokenizer


def fn(name, description, properties, required):
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required}}}


WEATHER = fn("get_weather", "Get the current weather for a city",
             {"city": {"type": "string", "description": "City name"},
              "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, ["city"])
SEARCH = fn("web_search", "Search the web. Returns the top results.",
            {"query": {"type": "string"}, "top_k": {"type": "integer", "default": 5, "minimum": 1},
             "fresh": {"type": "boolean", "default": False}, "score": {"type": "number", "default": 0.5}},
            ["query"])
PYTHON = fn("run_python", "Run Python code and return stdout (中文说明)",
            {"code": {"type": "string"}, "timeout_s": {"type": "number", "default": 1e-3}}, ["code"])


def call(cid, name, args):
    return {"id": cid, "type": "function",
            "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}


SYS = {"role": "system", "content": "You are a helpful assistant."}
CASES = []


def case(name, messages, mode, effort=None, drop=True):
    CASES.append({"name": name, "messages": messages, "thinking_mode": mode, "reasoning_effort": effort,
                  "drop_thinking": drop})


u = lambda c: {"role": "user", "content": c}  # noqa: E731
a = lambda c, r=None, **kw: {"role": "assistant", "content": c, **({"reasoning_content": r} if r else {}), **kw}  # noqa: E731
tool = lambda cid, c: {"role": "tool", "tool_call_id": cid, "content": c}  # noqa: E731

case("chat_single_user", [u("hello")], "chat")
case("thinking_single_user", [u("hello")], "thinking")
case("chat_system_user", [SYS, u("What is 2+2?")], "chat")
case("thinking_system_user_max", [SYS, u("Prove that sqrt(2) is irrational.")], "thinking", "max")
case("thinking_high_effort", [SYS, u("Plan a trip to Kyoto.")], "thinking", "high")
case("chat_max_effort_ignored", [u("hi")], "chat", "max")
case("thinking_multiturn_drops_old_reasoning",
     [SYS, u("Hello"), a("Hi! How can I help?", "The user greets me."), u("What is the capital of France?")],
     "thinking")
case("thinking_multiturn_keep_reasoning",
     [SYS, u("Hello"), a("Hi! How can I help?", "The user greets me."), u("What is the capital of France?")],
     "thinking", None, False)
case("chat_multiturn_with_reasoning_in_history",
     [SYS, u("Hello"), a("Hi!", "greeting"), u("Tell me a joke."), a("Why did the chicken...", "joke time"),
      u("Another one")], "chat")
case("thinking_trailing_assistant",
     [u("Capital of Italy?"), a("Rome.", "Easy: Rome.")], "thinking")
case("thinking_tools_in_system", [dict(SYS, tools=[WEATHER, SEARCH]), u("Weather in Paris?")], "thinking")
case("chat_tools_in_system", [dict(SYS, tools=[WEATHER, SEARCH]), u("Weather in Paris?")], "chat")
case("thinking_tool_call_and_result",
     [dict(SYS, tools=[WEATHER]), u("Weather in Beijing?"),
      a("", "I should call get_weather.", tool_calls=[call("call_1", "get_weather", {"city": "Beijing", "unit": "celsius"})]),
      tool("call_1", '{"temp": 22, "sky": "sunny"}')], "thinking")
case("thinking_parallel_calls_results_reordered",
     [dict(SYS, tools=[WEATHER, SEARCH]), u("Compare weather in Oslo and Rome, and search news."),
      a("Let me check.", "Three calls in parallel.", tool_calls=[
          call("c1", "get_weather", {"city": "Oslo"}), call("c2", "get_weather", {"city": "Rome"}),
          call("c3", "web_search", {"query": "news today", "top_k": 3})]),
      tool("c3", "headline A; headline B"), tool("c1", "Oslo: 3C"), tool("c2", "Rome: 18C")], "thinking")
case("thinking_tools_full_round_then_new_question",
     [dict(SYS, tools=[WEATHER]), u("Weather in Tokyo?"),
      a("", "Call the tool.", tool_calls=[call("t1", "get_weather", {"city": "Tokyo"})]),
      tool("t1", "Tokyo: 25C, humid"),
      a("It is 25°C and humid in Tokyo.", "Format the answer."), u("And tomorrow?")], "thinking")
case("chat_tools_full_round",
     [dict(SYS, tools=[WEATHER]), u("Weather in Tokyo?"),
      a("", tool_calls=[call("t1", "get_weather", {"city": "Tokyo"})]), tool("t1", "Tokyo: 25C"),
      a("25°C in Tokyo."), u("Thanks!")], "chat")
case("tool_call_argument_types",
     [dict(SYS, tools=[SEARCH, PYTHON]), u("Run it"),
      a("", "call", tool_calls=[call("x1", "run_python", {
          "code": "print(\"hi\")\nfor i in range(3):\n    print(i)", "timeout_s": 2.5,
          "env": {"A": [1, 2.0, -3, 1e-7, 1e20, 123456789012], "B": None, "C": True, "D": "中文 😀"},
          "flags": [], "opts": {}})]),
      tool("x1", "hi\n0\n1\n2")], "thinking")
case("tool_call_non_json_arguments",
     [dict(SYS, tools=[PYTHON]), u("Go"),
      a("", "call", tool_calls=[call("y1", "run_python", "print(1) # not JSON")]), tool("y1", "1")], "thinking")
case("tool_call_empty_arguments",
     [dict(SYS, tools=[SEARCH]), u("Go"),
      a("Calling.", tool_calls=[call("z1", "web_search", "{}")]), tool("z1", "nothing")], "chat")
case("developer_with_tools_and_reminder",
     [{"role": "system", "content": "该助手为DeepSeek。"},
      {"role": "latest_reminder", "content": "2026-01-01, Monday, Berlin"},
      {"role": "developer", "content": "Find recent papers on MoE routing.", "tools": [SEARCH]}], "thinking")
case("latest_reminder_after_user", [SYS, u("What day is it?"), {"role": "latest_reminder", "content": "Friday"}],
     "thinking")
case("latest_reminder_before_user", [SYS, {"role": "latest_reminder", "content": "Locale: zh-CN"}, u("你好")], "chat")
case("response_format_in_system",
     [dict(SYS, response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": {
         "type": "object", "properties": {"answer": {"type": "string"}, "confidence": {"type": "number"}}}}}),
      u("Is water wet?")], "chat")
case("consecutive_user_messages_merge", [u("First part."), u("Second part.")], "thinking")
case("user_then_system_then_user", [u("A"), {"role": "system", "content": "Be brief."}, u("B")], "chat")
case("task_title_after_exchange",
     [u("Explain transformers in one line."), a("Attention-based sequence models."),
      {"role": "user", "content": "Give this chat a title.", "task": "title"}], "chat")
case("task_output_has_no_thinking",
     [{"role": "user", "content": "Summarize: cats are great.", "task": "query"}, a("cats great")], "thinking")
case("task_action_thinking", [SYS, {"role": "user", "content": "Book a table.", "task": "action"}], "thinking")
case("assistant_prefix_wo_eos", [u("Write a haiku."), a("Autumn moon rises", "A haiku.", wo_eos=True)], "thinking")
case("developer_dropped_before_last_user",
     [{"role": "developer", "content": "Old instructions."}, a("ok", "noted"), u("New question?")], "thinking")
case("tool_content_parts",
     [dict(SYS, tools=[SEARCH]), u("Search cats"),
      a("", "search", tool_calls=[call("p1", "web_search", {"query": "cats"})]),
      {"role": "tool", "tool_call_id": "p1", "content": [{"type": "text", "text": "result one"},
                                                         {"type": "image_url", "image_url": {"url": "x"}},
                                                         {"type": "text", "text": "result two"}]}], "thinking")
case("unicode_and_literal_tags_in_content",
     [u("Здравствуй 你好 😀 — what does <think> mean?\n\tIndented\r\nCRLF"), a("It opens reasoning.", "r"),
      u("ありがとう")], "thinking")
case("long_agent_loop_max_effort",
     [dict(SYS, tools=[SEARCH, PYTHON]), u("Find the 10th prime and verify it."),
      a("", "Search first.", tool_calls=[call("s1", "web_search", {"query": "10th prime number"})]),
      tool("s1", "The 10th prime is 29."),
      a("", "Verify with code.", tool_calls=[call("s2", "run_python", {"code": "print([p for p in range(2,40) if all(p%d for d in range(2,p))][9])"})]),
      tool("s2", "29"),
      a("The 10th prime is 29.", "Verified."), u("Now the 100th?")], "thinking", "max")
case("empty_system_with_tools", [{"role": "system", "content": "", "tools": [WEATHER]}, u("Hi")], "chat")
case("system_only", [SYS], "thinking")
case("tool_result_after_plain_assistant", [u("Q"), a("A"), tool("none", "orphan result"), u("Q2")], "chat")
case("thinking_two_old_turns_drop",
     [u("1?"), a("one", "r1"), u("2?"), a("two", "r2"), u("3?")], "thinking")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--official", required=True, help="path to DeepSeek's encoding_dsv4.py")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    spec = importlib.util.spec_from_file_location("encoding_dsv4", args.official)
    enc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(enc)
    tok = Tokenizer.from_file(args.tokenizer)

    out = []
    for c in CASES:
        messages = json.loads(json.dumps(c["messages"]))  # the encoder must not see shared objects
        prompt = enc.encode_messages(messages, thinking_mode=c["thinking_mode"], drop_thinking=c["drop_thinking"],
                                     reasoning_effort=c["reasoning_effort"])
        out.append(dict(c, expected=prompt, ids=tok.encode(prompt).ids))
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"source": "encoding_dsv4.py (DeepSeek-V4 reference encoder)", "cases": out}, f,
                  ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(out)} cases to {args.out}")


if __name__ == "__main__":
    main()
