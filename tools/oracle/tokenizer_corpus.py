#!/usr/bin/env python3
"""Writes the tokenizer parity corpus and the benchmark text.

  tokenizer_corpus.py corpus OUT.jsonl   one {"text": ...} per line
  tokenizer_corpus.py bench OUT.txt      ~1 MB mixed-language text

Both are deterministic, so the reference and ember see the same bytes.
The corpus aims at the places tokenizers disagree: scripts, emoji
sequences, combining marks, control characters, whitespace runs, code,
numbers, special-token look-alikes, empty input and very long words."""
import json
import sys

TEXTS = [
    "",
    " ",
    "  ",
    "\n",
    "\t",
    "Hello world",
    "Hello, world! How are you doing today?",
    " leading space",
    "trailing space ",
    "  two leading spaces and two trailing  ",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say it's what we've done, isn't it? I'D DO IT. He'S HERE.",
    "don't DON'T Don'T 've 'll 're 's 't 'm 'd",
    "numbers: 0 1 12 123 1234 12345 123456 1234567 3.14159 -42 1e10 0x1F 1,000,000",
    "phone +1 (555) 012-3456, ISBN 978-3-16-148410-0",
    "Ünïcödé àccénts: café naïve résumé façade Ångström",
    "Combining: e\u0301 a\u0300 o\u0308 n\u0303 A\u030a (decomposed) vs é à ö ñ Å (composed)",
    "Zalgo: Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034da\u0357\u0369\u0350\u035a",
    "Ελληνικά: Η γρήγορη καφέ αλεπού πηδάει πάνω από το τεμπέλικο σκυλί. ΣΊΣΥΦΟΣ",
    "Русский: Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Українська: Гей, хлопці, не вспію! ґанок їжак єнот",
    "中文：我能吞下玻璃而不伤身体。人工智能正在改变世界。",
    "繁體中文：我能吞下玻璃而不傷身體。",
    "日本語：私はガラスを食べられます。それは私を傷つけません。カタカナとひらがな。",
    "한국어: 나는 유리를 먹을 수 있어요. 그래도 아프지 않아요.",
    "العربية: أنا قادر على أكل الزجاج و هذا لا يؤلمني.",
    "עברית: אני יכול לאכול זכוכית וזה לא מזיק לי.",
    "हिन्दी: मैं काँच खा सकता हूँ और मुझे उससे कोई चोट नहीं पहुंचती.",
    "தமிழ்: நான் கண்ணாடி சாப்பிடுவேன், அதனால் எனக்கு ஒரு கேடும் வராது.",
    "ไทย: ฉันกินกระจกได้ แต่มันไม่ทำให้ฉันเจ็บ",
    "Tiếng Việt: Tôi có thể ăn thủy tinh mà không hại gì.",
    "Türkçe: İstanbul'da ılık bir gün. IĞDIR ışık",
    "Deutsch: Größenwahn, Straße, Fußgängerübergänge, ẞ",
    "ქართული: მინას ვჭამ და არა მტკივა.",
    "Հայերեն: Կրնամ ապակի ուտել և ինծի անհանգիստ չըներ։",
    "አማርኛ: ብርጭቆ መብላት እችላለሁ፣ አይጎዳኝም።",
    "Emoji: 😀 😃 😄 👍🏽 ❤️ 🇺🇸 🇯🇵 🏳️‍🌈",
    "ZWJ: 👨‍👩‍👧‍👦 👩🏾‍💻 🧑‍🤝‍🧑 👁️‍🗨️ 🐻‍❄️",
    "Keycaps: 1️⃣ #️⃣ *️⃣ and variation selectors ☺︎ ☺️",
    "Math: ∀x∈ℝ, ∃y: x² + y² = z² → ∑ᵢ aᵢ ≤ ∞; ∫₀¹ f(x) dx ≈ π/4",
    "Fullwidth: ＡＢＣ１２３！？ and ligatures ﬁ ﬂ ﬀ and ℌ ℍ ① ⑴ ㎏",
    "Control chars: a\u0000b\u0001c\u0007d\u001be\u007ff",
    "C1 and separators: x\u0085y\u00a0z\u2028w\u2029v\u200bu\ufeffend",
    "Spaces: a\u2002b\u2003c\u2009d\u3000e\u202ff",
    "Tabs\tand\t\ttabs\t\t\tend",
    "Mixed newlines: unix\nwindows\r\nold mac\rend\n\r\n\n",
    "Many newlines\n\n\n\n\n\n\n\n\n\nafter",
    "a" + " " * 40 + "b",
    " " * 100,
    "\n" * 50,
    "\t \n \r\n \t\t  \n\n   x",
    "trailing newlines\n\n\n",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0; // done\n}\n",
    "const f = async (x) => { await fetch(`/api/${x}?q=1&r=2`); };",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%o%';",
    "<html><body><div class=\"x\">Hi &amp; bye</div></body></html>",
    "{\"key\": [1, 2.5, true, null], \"nested\": {\"a\": \"b\"}}",
    "URL: https://example.com/path/to/page?query=value&other=123#anchor",
    "email: someone@example.org, path: C:\\Users\\name\\file.txt, ~/.bashrc",
    "$$E = mc^2$$ and \\frac{a}{b} \\alpha_{i}^{2}",
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "text with <|im_start|> inside and <|im_end|> too",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
    "<｜begin▁of▁sentence｜><｜User｜>Hello<｜Assistant｜>",
    "<think>\nreasoning here\n</think>\n\nanswer",
    "<|endoftext|><|endoftext|>x<|endoftext|>",
    "almost special: <|im_start| <im_start|> <|IM_START|> < |im_start|> <<|im_end|>>",
    "<unk> <pad> <eos> <s> </s> <mask> [CLS] [SEP]",
    "<0x41> <0xFF> byte-looking text",
    "▁ already has the metaspace ▁▁ char",
    "Ġ and Ċ look like byte-level pieces",
    "a",
    "ab",
    "!",
    "?!?!",
    "...",
    "----------",
    "==========================================================================",
    "************",
    "a" * 1000,
    "x" * 300 + "y" * 300,
    "supercalifragilisticexpialidocious" * 30,
    "pneumonoultramicroscopicsilicovolcanoconiosis",
    "ThisIsAVeryLongCamelCaseIdentifierNameThatGoesOnAndOnForeverAndEver",
    "snake_case_identifier_with_many_parts_and_more_parts_123",
    "🙂" * 50,
    "中" * 200,
    "ab" * 400,
    "1234567890" * 20,
    "ÀÁÂÃÄÅÆÇÈÉÊËÌÍÎÏÐÑÒÓÔÕÖ×ØÙÚÛÜÝÞßàáâãäåæçèéêëìíîïðñòóôõö÷øùúûüýþÿ",
    "Ωmega ohm Ω and Kelvin K (compatibility characters)",
    "ﬀ ﬃ ﬄ ſt Ǆ ǅ ǆ ǈ",
    "Hangul jamo: \u1100\u1161\u11a8 vs 각",
    "Devanagari conjuncts: क्षत्रज्ञ",
    "Mixed: Hello世界! Привет мир 123 test—dash – en — em … ellipsis",
    "Quotes: “double” ‘single’ «guillemets» „German“ 「Japanese」",
    "Currency: $100 €50 £30 ¥1000 ₹500 ₿0.5",
    "Repeated punctuation!!! ??? ... ,,, ;;; ::: --- ___ ***",
    "   indented line\n\tindented with tab\n  \n",
    "end with space and newline \n",
    " \n ",
    "I've got 99 problems but a glitch ain't one.",
    "CAPS LOCK IS CRUISE CONTROL FOR COOL",
    "MiXeD cAsE tExT",
    "Private use: \ue000\uf8ff and plane 15: \U000f0000",
    "Astral: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕌𝕟𝕚𝕔𝕠𝕕𝕖 𐍈 𓀀 𠜎𠜱",
    "Noncharacters: \ufdd0 \ufffe \U0001fffe",
    "Replacement char: \ufffd and BOM \ufeff at start",
    "  <|im_start|>  spaced specials  <|im_end|>  ",
    "word<|endoftext|>word<|im_end|><|im_start|>",
    "<start_of_turn><end_of_turn><eos><pad>",
    "\r\n\r\n",
    "'s",
    "'S'T're'VE'm'LL'd 's's",
    "    \n    x\n\t\ty",
    "Other numerals: ١٢٣٤ ۴۵۶ १२३ Ⅻ ½ ² ①",
    "Bidi: \u202eevil\u202c and \u200e\u200f marks, ZWNJ \u200c ZWJ \u200d alone",
    "Tags: 🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f flag",
    "i" * 257 + " " + "ij" * 130,
    "Mixed scripts in one word: abcабвαβγ中文ひらがな123",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua.",
]


def corpus():
    return TEXTS


def bench_text(target=1_000_000):
    # A deterministic shuffle of corpus lines (long repetitive words left
    # out) so the text looks like varied multilingual prose and code.
    lines = [t for t in TEXTS if t and len(t) < 400]
    out, size, state = [], 0, 12345
    while size < target:
        state = (state * 1103515245 + 12345) % (1 << 31)
        t = lines[state % len(lines)]
        out.append(t)
        size += len(t.encode("utf-8")) + 1
    return "\n".join(out)


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("corpus", "bench"):
        sys.exit("usage: tokenizer_corpus.py corpus|bench OUT")
    with open(sys.argv[2], "w", encoding="utf-8", newline="") as f:
        if sys.argv[1] == "corpus":
            for t in corpus():
                f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
        else:
            f.write(bench_text())


if __name__ == "__main__":
    main()
