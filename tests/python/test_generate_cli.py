"""test_generate_cli.py: `dsv4 generate` on a tiny random model with the real tokenizer: greedy
output is reproducible, token-id prompts and --chat work, stop strings end it, and an unavailable
device is refused with a message. Usage: python3 tests/python/test_generate_cli.py [--bin build/dsv4]"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import REPO, binary_from_argv, check  # noqa: E402


def main():
    dsv4 = binary_from_argv()
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "m")
        subprocess.run([dsv4, "make-model", "--preset", "tiny", "--layers", "4", "--tokenizer",
                        os.path.join(REPO, "third_party", "tokenizer", "tokenizer.json"), "--out", model],
                       check=True, capture_output=True)

        def gen(*args):
            p = subprocess.run([dsv4, "generate", "--model", model, *args], capture_output=True, text=True)
            return p.returncode, p.stdout, p.stderr

        a = gen("--prompt", "Hello there", "--max-tokens", "6", "--temperature", "0")
        b = gen("--prompt", "Hello there", "--max-tokens", "6", "--temperature", "0")
        check(a[0] == 0 and a[1] == b[1] and a[1].strip(), (a, b))
        check("2 prompt + 6 output tokens, finish length" in a[2], a[2])
        c = gen("--token-ids", "5,6,7", "--max-tokens", "3", "--seed", "1")
        check(c[0] == 0 and "3 prompt + 3 output tokens" in c[2], c)
        d_ = gen("--prompt", "Hi", "--chat", "--thinking", "--max-tokens", "2")
        check(d_[0] == 0 and "output tokens" in d_[2], d_)
        text = a[1].rstrip("\n")
        stop = text[len(text) // 2:len(text) // 2 + 2]
        if stop.strip():
            e = gen("--prompt", "Hello there", "--max-tokens", "6", "--temperature", "0", "--stop", stop)
            check(e[0] == 0 and e[1].rstrip("\n") == text[:text.index(stop)] and "finish stop" in e[2], (stop, e))
        # Without a GPU (CI) --device cuda is a clear error, not a crash; on a GPU machine the tiny
        # model's dimensions are refused by the CUDA runner, which runs Flash's shapes only.
        f = gen("--prompt", "x", "--device", "cuda")
        check(f[0] != 0 and ("no CUDA device" in f[2] or "no CUDA support" in f[2] or "GPU" in f[2]), f)
    print("test_generate_cli: all passed")


if __name__ == "__main__":
    main()
