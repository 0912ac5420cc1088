#!/usr/bin/env python3
"""Writes tests/tokenizer/corpus.json, the golden-test corpus: a list of entries, each
{"text": STRING} or {"hex": BYTES} (bytes that are not valid UTF-8).

Usage: tests/tokenizer/make_corpus.py [TOKENIZER_MODELS_DIR]
With the models folder (scripts/fetch_tokenizers.sh fills tests/tokenizer/models/) every added
token of every tokenizer is also written literally, alone and inside text.

Left out on purpose: U+0085, U+FEFF, U+180E and U+017F. Hugging Face tokenizers (Rust regex) and
the JavaScript reference disagree on them (JavaScript's \\s takes U+FEFF but not U+0085, and it
rewrites (?i:'s) as [sS], which does not match the long s); we follow the Rust behaviour.
"""
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
models = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "models")

texts = []
def add(*xs):
    texts.extend(xs)

# English prose.
add("Hello world", "Hello world!", "hello, world.", "The quick brown fox jumps over the lazy dog.",
    "It was the best of times, it was the worst of times.",
    "I'm sure you'll like it; we've tried, they'd agree, it's fine and he's done.",
    "DON'T SHOUT. I'LL WAIT. YOU'RE LATE. WE'VE SEEN. I'M HERE. HE'D GO.",
    "Mr. Smith went to Washington, D.C., on Jan. 5th.",
    "\"Quoted,\" she said. 'Single quotes' too.", "Well... maybe?! (Or not.)",
    "e.g. i.e. etc. vs. a.m. p.m.", "state-of-the-art, well-known, 21st-century",
    "Write a haiku about GPUs", "What is the capital of France?",
    "Once upon a time, in a land far away, there lived a king who loved numbers.",
    "A megakernel runs the whole forward pass of a decode step as one persistent launch.")
readme = open(os.path.join(root, "README.md"), encoding="utf-8").read().split("\n")
add(*[l for l in readme if len(l) > 30][:60])
# Code.
src = open(os.path.join(root, "tokenizer", "utf8.cpp"), encoding="utf-8").read()
add(src[:2000], src[2000:4000])
add(*[l for l in src.split("\n") if l.strip()][:30])
add("def f(x):\n    return x**2 + 1\n", "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "if x != None and y >= 3:\n\tprint(f\"{x=}, {y!r}\")", "#include <stdio.h>\nint main(void) { return 0; }\n",
    "SELECT name, COUNT(*) FROM users WHERE age > 21 GROUP BY name;", "let v: Vec<u8> = vec![0xff; 16];",
    "<html><body><p class=\"x\">Hi</p></body></html>", "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
    "const re = /^[a-z]+$/gi; // regex", "x+=1;y-=2;z*=3;w/=4;", "a->b, c::d, e=>f, g|>h, i<=>j",
    "    indented four\n        indented eight\n", "\ttab\tseparated\tvalues\n1\t2\t3",
    "~!@#$%^&*()_+`-={}|[]\\:\";'<>?,./", "https://example.com/path?q=1&r=two#frag", "user@example.org")
# Numbers and dates.
add("1", "12", "123", "1234", "12345", "1234567890", "3.14159", "-42", "+7", "1e-5", "6.022e23", "0x7fffffff",
    "2026-11-30", "12/31/1999", "30.11.2026", "07:40:00 UTC", "$1,234.56", "€99,90", "100%", "1/2 + 3/4 = 5/4",
    "Call 555-0123 or +1 (800) 555-0199.", "Version 3.7.2 released on 2024-06-01T12:00:00Z",
    "The year 1984 had 366 days? No, 1984 was a leap year: 366.", "١٢٣٤٥ ٦٧٨٩٠", "一二三 123 四五六",
    "½ ¾ ² ³ ⅔ Ⅻ", "π≈3.14159265358979323846")
# Whitespace runs, leading spaces, newlines.
add(" ", "  ", "   ", "    ", "\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", " \n ", "\t \t", "a  b", "a   b",
    "a    b", "a\tb", "a\nb", "a\n\nb", "a \n b", "a  \n\n  b", " leading", "  two leading", "    four leading",
    "trailing ", "trailing  ", "trailing\n", "\nleading newline", " \n\n \n", "x" + " " * 50 + "y",
    "line one\nline two\n  line three\n", "word\u00a0nbsp", "em\u2003space", "ideographic\u3000space",
    "thin\u2009space", "line\u2028separator", "para\u2029separator", "mixed \t\n\r\x0b\x0c whitespace")
# CJK, Arabic and other scripts.
add("日本語", "日本語のテキストです。", "東京は日本の首都です。", "我爱自然语言处理。", "今天天气很好，我们去公园散步吧！",
    "中文，标点；符号：“引号”。", "한국어 텍스트입니다.", "안녕하세요, 세계!", "カタカナとひらがな", "ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３",
    "مرحبا بالعالم", "اللغة العربية جميلة.", "كتب الطالب الدرس في ٣ ساعات.", "שלום עולם", "Привет, мир!",
    "Ελληνικά γράμματα", "नमस्ते दुनिया", "สวัสดีชาวโลก", "Tiếng Việt có dấu", "Ärger über Öl, Übermut, Straße",
    "naïve café résumé façade", "ქართული", "Հայերեն", "አማርኛ", "తెలుగు", "বাংলা ভাষা", "ਪੰਜਾਬੀ", "தமிழ்")
# Emoji, ZWJ sequences, flags, modifiers.
add("😀", "😀😃😄😁", "I ❤️ GPUs 🚀", "👨‍👩‍👧‍👦", "👩🏽‍💻", "🏳️‍🌈", "🇫🇷🇯🇵🇺🇸", "👍🏻👍🏼👍🏽👍🏾👍🏿", "1️⃣2️⃣#️⃣",
    "🧑‍🤝‍🧑", "❤️‍🔥", "🐈‍⬛", "emoji at end 🎉", "🎉 emoji at start", "a😀b😀c", "✓ ✗ ★ ☆ ♥ ♦", "∀x∈ℝ: x²≥0")
# Combining marks (NFC matters for Qwen).
add("e\u0301", "cafe\u0301", "A\u030a", "\u0041\u030a\u0301", "n\u0303", "Z\u0351\u0352\u0357\u0310\u0346a\u0300l\u0301g\u0302o",
    "\u1e9b\u0323", "\u0065\u0323\u0302", "Vie\u0323\u0302t Nam", "\u00c5 vs A\u030a", "\uac00 vs \u1100\u1161",
    "ﬁ ligature", "Ω ohm sign", "K kelvin", "\u0915\u093c", "\u05e9\u05c1\u05b8")
# Very long words.
add("a" * 1000, "supercalifragilisticexpialidocious" * 30, "9" * 500, "😀" * 200, "日本語" * 300,
    "Pneumonoultramicroscopicsilicovolcanoconiosis", "x" * 5000, " " * 1000, "\n" * 300, "ab" * 2000,
    "-" * 400, "=" * 300 + "\n", "Ünïcödé" * 100, "ა" * 500)
# Apostrophes and casing.
add("'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'Re", "it's", "IT'S", "dogs'", "''", "'",
    "rock 'n' roll", "’curly’ apostrophes aren’t ASCII", "can't won't shan't y'all'd've")

# Random mixtures (fixed seed): scripts, whitespace, digits, punctuation, apostrophes, ZWJ,
# combining marks and fragments of special tokens side by side.
import random
rng = random.Random(2026)
pool = ["a", "Z", "the", "The", " ", "  ", "   ", "\n", "\n\n", "\r\n", "\t", "7", "42", "2026", "3.5", ".", ",", "!?",
        "'s", "'LL", "'re", "é", "e\u0301", "ñ", "日本", "語", "中文", "😀", "\u200d", "👨\u200d👩\u200d👧", "🇫🇷", "مرحبا", "שלום",
        "Привет", "<|", "|>", "<s", "eot_id", "im_end", "\u00a0", "\u3000", "->", "::", "{}", "();", "\u0301", "ß", "İ", "Ω"]
for _ in range(160):
    texts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 25))))

entries = [{"text": t} for t in texts]
# Not valid UTF-8 (bytes as hex).
for h in ["ff", "fe", "c0", "c080", "80", "bf", "e282", "e28228", "f0908d", "f09f98", "eda080", "f4908080",
          "48656c6c6fff576f726c64", "c3", "c328", "a0a1", "e2", "f8a1a1a1a1", "61e282ac62", "e0808f", "ed9fbf",
          "7af09f9880", "f09f98807a80", "4869c0af"]:
    entries.append({"hex": h})

# Added tokens, literally.
specials = []
for name in ["llama3_1", "qwen3", "llama2"]:
    p = os.path.join(models, name, "tokenizer.json")
    if os.path.exists(p):
        specials += [a["content"] for a in json.load(open(p, encoding="utf-8"))["added_tokens"]]
if not specials:
    sys.exit(f"make_corpus: no tokenizer.json under {models}; run scripts/fetch_tokenizers.sh first")
seen = set()
for i, s in enumerate(specials):
    if s in seen:
        continue
    seen.add(s)
    entries.append({"text": s})
    if i % 4 == 0:
        entries.append({"text": f"Hello {s} world"})
    elif i % 4 == 1:
        entries.append({"text": f"{s}\n\nx{s}{s} y"})
entries.append({"text": "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
                        "<|start_header_id|>assistant<|end_header_id|>\n\n"})
entries.append({"text": "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"})
entries.append({"text": "<s>[INST] Hello [/INST] Hi</s>"})
entries.append({"text": "<|im_start|<|im_end|>|> <think>x</think> <|endoftext"})

out = os.path.join(here, "corpus.json")
with open(out, "w", encoding="utf-8") as f:
    json.dump(entries, f, ensure_ascii=False, indent=0)
    f.write("\n")
print(f"wrote {out}: {len(entries)} entries")
