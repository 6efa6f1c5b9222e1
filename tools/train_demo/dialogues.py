"""dialogues.py — synthetic chat conversations for the demo model.

Each generator returns (messages, tools, thinking): OpenAI-style messages, the
tool list offered (or None) and whether the final turn carries reasoning. The
conversations are short and formulaic on purpose: they teach a very small model
the chat format, when to call a tool and how to use its result, and how to
reason inside <think> when thinking is enabled."""
import json
import random

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "Name of the city, e.g. Paris"}},
        "required": ["city"]}}}
ADD_TOOL = {"type": "function", "function": {
    "name": "add",
    "description": "Add two numbers and return their sum.",
    "parameters": {"type": "object", "properties": {
        "a": {"type": "number", "description": "First number"},
        "b": {"type": "number", "description": "Second number"}},
        "required": ["a", "b"]}}}
TIME_TOOL = {"type": "function", "function": {
    "name": "get_time",
    "description": "Get the current local time in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "Name of the city"}},
        "required": ["city"]}}}

CITIES = ["Paris", "London", "Berlin", "Madrid", "Rome", "Lisbon", "Vienna", "Prague", "Warsaw",
          "Dublin", "Oslo", "Stockholm", "Helsinki", "Copenhagen", "Amsterdam", "Brussels",
          "Zurich", "Athens", "Istanbul", "Cairo", "Nairobi", "Lagos", "Cape Town", "Tokyo",
          "Osaka", "Seoul", "Beijing", "Shanghai", "Mumbai", "Delhi", "Bangkok", "Singapore",
          "Jakarta", "Sydney", "Melbourne", "Auckland", "New York", "Boston", "Chicago",
          "Denver", "Seattle", "San Francisco", "Los Angeles", "Houston", "Miami", "Toronto",
          "Montreal", "Vancouver", "Mexico City", "Lima", "Bogota", "Santiago", "Buenos Aires",
          "Sao Paulo", "Reykjavik", "Edinburgh", "Munich", "Hamburg", "Lyon", "Barcelona"]
CONDITIONS = ["sunny", "cloudy", "rainy", "windy", "snowy", "foggy", "partly cloudy", "stormy",
              "clear", "drizzly"]
CAPITALS = [("France", "Paris"), ("Germany", "Berlin"), ("Spain", "Madrid"), ("Italy", "Rome"),
            ("Portugal", "Lisbon"), ("Austria", "Vienna"), ("Poland", "Warsaw"),
            ("Ireland", "Dublin"), ("Norway", "Oslo"), ("Sweden", "Stockholm"),
            ("Finland", "Helsinki"), ("Denmark", "Copenhagen"), ("the Netherlands", "Amsterdam"),
            ("Belgium", "Brussels"), ("Switzerland", "Bern"), ("Greece", "Athens"),
            ("Turkey", "Ankara"), ("Egypt", "Cairo"), ("Kenya", "Nairobi"), ("Nigeria", "Abuja"),
            ("Japan", "Tokyo"), ("South Korea", "Seoul"), ("China", "Beijing"),
            ("India", "New Delhi"), ("Thailand", "Bangkok"), ("Indonesia", "Jakarta"),
            ("Australia", "Canberra"), ("New Zealand", "Wellington"), ("Canada", "Ottawa"),
            ("the United States", "Washington, D.C."), ("Mexico", "Mexico City"),
            ("Peru", "Lima"), ("Colombia", "Bogota"), ("Chile", "Santiago"),
            ("Argentina", "Buenos Aires"), ("Brazil", "Brasilia"), ("Iceland", "Reykjavik"),
            ("Hungary", "Budapest"), ("the Czech Republic", "Prague"), ("Romania", "Bucharest"),
            ("Ukraine", "Kyiv"), ("Morocco", "Rabat"), ("Vietnam", "Hanoi"),
            ("the Philippines", "Manila"), ("Cuba", "Havana"), ("Scotland", "Edinburgh")]
COLORS = {"the sky": "blue", "grass": "green", "snow": "white", "a banana": "yellow",
          "a ripe tomato": "red", "coal": "black", "an orange": "orange", "a lemon": "yellow",
          "a carrot": "orange", "milk": "white", "a crow": "black", "a strawberry": "red",
          "an emerald": "green", "a plum": "purple", "chocolate": "brown", "the sun": "yellow"}
SOUNDS = {"dog": "barks", "cat": "meows", "cow": "moos", "duck": "quacks", "sheep": "bleats",
          "horse": "neighs", "lion": "roars", "owl": "hoots", "frog": "croaks", "pig": "oinks",
          "bee": "buzzes", "snake": "hisses", "wolf": "howls", "mouse": "squeaks"}
OPPOSITES = {"hot": "cold", "big": "small", "fast": "slow", "happy": "sad", "up": "down",
             "light": "dark", "old": "young", "open": "closed", "early": "late", "full": "empty",
             "hard": "soft", "high": "low", "strong": "weak", "rich": "poor", "wet": "dry",
             "loud": "quiet", "long": "short", "thick": "thin", "near": "far", "true": "false"}
LISTS = {"fruits": ["apple", "banana", "cherry", "grape", "mango", "pear", "plum", "peach", "kiwi"],
         "colors": ["red", "blue", "green", "yellow", "purple", "orange", "black", "white"],
         "animals": ["dog", "cat", "horse", "elephant", "tiger", "rabbit", "owl", "dolphin"],
         "planets": ["Mercury", "Venus", "Earth", "Mars", "Jupiter", "Saturn", "Uranus", "Neptune"],
         "vegetables": ["carrot", "potato", "onion", "pea", "spinach", "cabbage", "leek", "bean"],
         "programming languages": ["C", "Python", "Rust", "Go", "JavaScript", "Java", "Haskell"],
         "musical instruments": ["piano", "violin", "guitar", "flute", "drum", "trumpet", "cello"]}
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
NAMES = ["Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy",
         "Mallory", "Nina", "Oscar", "Peggy", "Rupert", "Sybil", "Trent", "Victor", "Wendy", "Zoe"]
WORDS = ["apple", "house", "river", "garden", "music", "window", "planet", "pencil", "bridge",
         "orange", "winter", "kitten", "rocket", "candle", "forest", "island", "summer", "yellow"]
SYSTEMS = [None, None, None, None, "You are a helpful assistant.",
           "You are Ember Demo, a small assistant.", "Answer briefly.",
           "You are a friendly assistant. Keep answers short.",
           "You are a helpful assistant. Use tools when they help."]
IDENTITY = ("I am Ember Demo, a very small language model that ships with ember to show chat, "
            "streaming, tool calls and reasoning. I know very little, so please do not rely on "
            "my answers.")

CODE = [
    ("Write a Python function that adds two numbers.",
     "Here is a small function:\n\n```python\ndef add(a, b):\n    return a + b\n```\n\n"
     "For example, `add(2, 3)` returns **5**."),
    ("Write hello world in C.",
     "Here is the classic program:\n\n```c\n#include <stdio.h>\n\nint main(void) {\n"
     "    printf(\"Hello, world!\\n\");\n    return 0;\n}\n```\n\n"
     "Compile it with `cc hello.c` and run `./a.out`."),
    ("Write hello world in Python.",
     "```python\nprint(\"Hello, world!\")\n```\n\nSave it as `hello.py` and run `python3 hello.py`."),
    ("Write hello world in JavaScript.",
     "```javascript\nconsole.log(\"Hello, world!\");\n```\n\nRun it with `node hello.js`."),
    ("How do I reverse a string in Python?",
     "Use slicing with a step of **-1**:\n\n```python\ntext = \"hello\"\nprint(text[::-1])  # olleh\n```"),
    ("Write a Python function for the factorial of n.",
     "A simple loop works well:\n\n```python\ndef factorial(n):\n    result = 1\n"
     "    for i in range(2, n + 1):\n        result *= i\n    return result\n```\n\n"
     "For example, `factorial(5)` is **120**."),
    ("How do I check if a number is even in Python?",
     "Use the remainder operator `%`:\n\n```python\ndef is_even(n):\n    return n % 2 == 0\n```"),
    ("How do I list the files in a directory from the shell?",
     "Use `ls`:\n\n```bash\nls -l\n```\n\nAdd `-a` to also show hidden files."),
    ("Write a C function that returns the larger of two integers.",
     "```c\nint max_int(int a, int b) {\n    return a > b ? a : b;\n}\n```"),
    ("How do I find the largest number in a Python list?",
     "Use the built-in `max`:\n\n```python\nnumbers = [3, 9, 4]\nprint(max(numbers))  # 9\n```"),
]
SMALLTALK = [
    (["Hello", "Hi", "Hey", "Hello!", "Hi there", "Good morning", "Good evening", "hello"],
     ["Hello! How can I help you today?", "Hi! What can I do for you?",
      "Hello! What would you like to talk about?"]),
    (["How are you?", "How are you doing?", "How is it going?"],
     ["I am doing well, thank you. How can I help you?",
      "I am fine, thanks for asking! What can I do for you?"]),
    (["Thank you", "Thanks!", "Thanks a lot", "thank you very much"],
     ["You're welcome!", "Glad I could help!", "You're welcome. Anything else?"]),
    (["Goodbye", "Bye!", "See you later"], ["Goodbye! Have a nice day.", "Bye! Take care."]),
    (["Who are you?", "What is your name?", "What are you?", "Introduce yourself."], [IDENTITY]),
    (["What can you do?", "What are you good for?"],
     ["I can chat a little, answer simple questions, call tools such as a weather lookup or a "
      "calculator when they are offered, and show my reasoning when thinking is on. I am tiny, "
      "so my answers are often wrong."]),
    (["Tell me a joke.", "Tell me a joke", "Say something funny."],
     ["Why did the programmer quit his job? Because he didn't get arrays.",
      "I would tell you a joke about UDP, but you might not get it.",
      "Why do programmers prefer dark mode? Because light attracts bugs."]),
]


def _pick(r, xs):
    return xs[r.randrange(len(xs))]


def _system(r, tools):
    s = _pick(r, SYSTEMS)
    return [{"role": "system", "content": s}] if s else []


def _num(r):
    k = r.random()
    if k < 0.45:
        return r.randint(0, 20)
    if k < 0.8:
        return r.randint(10, 999)
    if k < 0.95:
        return r.randint(100, 99999)
    return round(r.uniform(0, 100), 1)


def _fmt(x):
    return str(int(x)) if float(x).is_integer() else str(x)


def _sum(a, b):
    s = a + b
    return round(s, 1) if isinstance(s, float) else s


def _call(name, args, r):
    return {"id": "call_%06d" % r.randrange(10 ** 6), "type": "function",
            "function": {"name": name, "arguments": args}}


def _weather_result(r, city):
    return {"city": city, "temperature": r.randint(-10, 35), "unit": "celsius",
            "condition": _pick(r, CONDITIONS)}


def _weather_answer(r, res):
    c, t = res["city"], res["temperature"]
    return _pick(r, [
        "It is %s in %s right now, at %d degrees Celsius." % (res["condition"], c, t),
        "The weather in %s is %s with a temperature of %d degrees Celsius." % (c, res["condition"], t),
        "%s: %s, %d degrees Celsius." % (c, res["condition"].capitalize(), t),
    ])


WEATHER_Q = ["What's the weather in {c}?", "What is the weather like in {c} today?",
             "How is the weather in {c}?", "Tell me the weather in {c}.", "weather in {c}",
             "Is it cold in {c} right now?", "What's the temperature in {c}?",
             "Do I need an umbrella in {c} today?", "Can you check the weather in {c}?"]
ADD_Q = ["What is {a} plus {b}?", "Add {a} and {b}.", "What's {a} + {b}?",
         "Can you add {a} and {b}?", "Compute the sum of {a} and {b}.", "{a} + {b} = ?",
         "Please add {a} to {b}."]


def tools_for(r, needed):
    pool = [WEATHER_TOOL, ADD_TOOL, TIME_TOOL]
    tools = [t for t in pool if t["function"]["name"] in needed]
    for t in pool:
        if t not in tools and r.random() < 0.5:
            tools.append(t)
    r.shuffle(tools)
    return tools


def gen_weather_tool(r, think):
    multi = r.random() < 0.12
    cities = r.sample(CITIES, 2) if multi else [_pick(r, CITIES)]
    q = ("What's the weather in %s and %s?" % tuple(cities)) if multi else \
        _pick(r, WEATHER_Q).format(c=cities[0])
    tools = tools_for(r, {"get_weather"})
    msgs = _system(r, tools) + [{"role": "user", "content": q}]
    call = {"role": "assistant", "content": "",
            "tool_calls": [_call("get_weather", {"city": c}, r) for c in cities]}
    if think:
        call["reasoning_content"] = (
            "The user wants the current weather in %s. I cannot know it myself, but the "
            "get_weather tool can look it up, so I will call it%s." %
            (" and ".join(cities), " once for each city" if multi else " with city=" + cities[0]))
    msgs.append(call)
    results = [_weather_result(r, c) for c in cities]
    for tc, res in zip(call["tool_calls"], results):
        msgs.append({"role": "tool", "tool_call_id": tc["id"], "content": json.dumps(res)})
    final = {"role": "assistant", "content": " ".join(_weather_answer(r, x) for x in results)}
    if think:
        final["reasoning_content"] = "The tool answered: " + "; ".join(
            "%s is %s at %d degrees" % (x["city"], x["condition"], x["temperature"])
            for x in results) + ". I will report this to the user."
    msgs.append(final)
    return msgs, tools, think


def gen_add_tool(r, think):
    a, b = _num(r), _num(r)
    tools = tools_for(r, {"add"})
    msgs = _system(r, tools) + [{"role": "user", "content": _pick(r, ADD_Q).format(a=_fmt(a), b=_fmt(b))}]
    call = {"role": "assistant", "content": "", "tool_calls": [_call("add", {"a": a, "b": b}, r)]}
    if think:
        call["reasoning_content"] = ("The user asks for the sum of %s and %s. The add tool computes "
                                     "it exactly, so I will call it with a=%s and b=%s." %
                                     (_fmt(a), _fmt(b), _fmt(a), _fmt(b)))
    s = _sum(a, b)
    msgs += [call, {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"],
                    "content": json.dumps({"result": s})}]
    final = {"role": "assistant", "content": _pick(r, ["%s + %s = %s.", "The sum of %s and %s is %s.",
                                                          "%s plus %s equals %s."]) % (_fmt(a), _fmt(b), _fmt(s))}
    if think:
        final["reasoning_content"] = "The add tool returned %s. I will give that as the answer." % _fmt(s)
    msgs.append(final)
    return msgs, tools, think


def gen_time_tool(r, think):
    c = _pick(r, CITIES)
    tools = tools_for(r, {"get_time"})
    msgs = _system(r, tools) + [{"role": "user", "content": _pick(r, [
        "What time is it in {c}?", "What's the local time in {c}?", "Tell me the time in {c}."]).format(c=c)}]
    call = {"role": "assistant", "content": "", "tool_calls": [_call("get_time", {"city": c}, r)]}
    if think:
        call["reasoning_content"] = "The user wants the local time in %s. I will call get_time." % c
    hm = "%02d:%02d" % (r.randint(0, 23), r.randint(0, 59))
    msgs += [call, {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"],
                    "content": json.dumps({"city": c, "time": hm})}]
    final = {"role": "assistant", "content": "It is %s in %s." % (hm, c)}
    if think:
        final["reasoning_content"] = "The tool says it is %s in %s." % (hm, c)
    msgs.append(final)
    return msgs, tools, think


def gen_no_tool_weather(r, think):
    c = _pick(r, CITIES)
    msgs = _system(r, None) + [{"role": "user", "content": _pick(r, WEATHER_Q).format(c=c)}]
    a = {"role": "assistant", "content": "I cannot check the current weather in %s because I have no "
         "weather tool here. A local weather service will know." % c}
    if think:
        a["reasoning_content"] = ("The user asks about the weather in %s, but no tool is offered and I "
                                  "cannot know live weather. I will say so." % c)
    return msgs + [a], None, think


def _qa(r, think, tools_chance=0.3):
    """A single question with a direct answer; tools may be offered but are not needed."""
    kind = r.randrange(11)
    if kind == 0:
        country, cap = _pick(r, CAPITALS)
        q = _pick(r, ["What is the capital of {x}?", "What's the capital of {x}?",
                      "Name the capital of {x}.", "capital of {x}?"]).format(x=country)
        a = "The capital of %s is %s." % (country, cap)
        t = "The user asks for the capital of %s. The capital of %s is %s." % (country, country, cap)
    elif kind == 1:
        thing, col = _pick(r, sorted(COLORS.items()))
        q = "What color is %s?" % thing
        a = "%s is %s." % (thing[0].upper() + thing[1:], col)
        t = "The user asks about the color of %s. It is %s." % (thing, col)
    elif kind == 2:
        an, s = _pick(r, sorted(SOUNDS.items()))
        q = _pick(r, ["What sound does a %s make?", "What does a %s say?"]) % an
        a = "A %s %s." % (an, s)
        t = "A %s %s, so I will say that." % (an, s)
    elif kind == 3:
        w, o = _pick(r, sorted(OPPOSITES.items()))
        if r.random() < 0.5:
            w, o = o, w
        q = _pick(r, ["What is the opposite of %s?", "Opposite of %s?"]) % w
        a = "The opposite of \"%s\" is \"%s\"." % (w, o)
        t = "The opposite of %s is %s." % (w, o)
    elif kind == 4:
        cat, items = _pick(r, sorted(LISTS.items()))
        n = r.randint(2, 5)
        sel = r.sample(items, n)
        q = _pick(r, ["List %d %s.", "Name %d %s.", "Give me %d %s."]) % (n, cat)
        if r.random() < 0.5:
            a = "Here are %d %s:\n\n" % (n, cat) + "\n".join("- %s" % x for x in sel)
        else:
            a = "Here are %d %s:\n\n" % (n, cat) + "\n".join("%d. %s" % (i + 1, x) for i, x in enumerate(sel))
        t = "The user wants %d %s. I will list %s." % (n, cat, ", ".join(sel))
    elif kind == 5:
        i = r.randrange(7)
        q = "What day comes after %s?" % DAYS[i]
        a = "%s comes after %s." % (DAYS[(i + 1) % 7], DAYS[i])
        t = "The days go %s, %s. So the answer is %s." % (DAYS[i], DAYS[(i + 1) % 7], DAYS[(i + 1) % 7])
    elif kind == 6:
        i = r.randrange(12)
        q = "Which month comes after %s?" % MONTHS[i]
        a = "%s comes after %s." % (MONTHS[(i + 1) % 12], MONTHS[i])
        t = "After %s comes %s." % (MONTHS[i], MONTHS[(i + 1) % 12])
    elif kind == 7:
        w = _pick(r, WORDS)
        q = _pick(r, ["How do you spell %s?", "Spell the word %s.", "How many letters are in %s?"]) % w
        if q.startswith("How many"):
            a = "The word \"%s\" has %d letters." % (w, len(w))
            t = "%s is spelled %s, which is %d letters." % (w, "-".join(w), len(w))
        else:
            a = "%s is spelled %s." % (w.capitalize(), "-".join(w.upper()))
            t = "I spell it letter by letter: %s." % "-".join(w)
    elif kind == 8:
        a_, b_ = r.randint(0, 20), r.randint(0, 20)
        if r.random() < 0.5:
            q = _pick(r, ["What is %d times %d?", "%d x %d = ?", "Multiply %d by %d."]) % (a_, b_)
            a = "%d x %d = %d." % (a_, b_, a_ * b_)
            t = "%d times %d is %d." % (a_, b_, a_ * b_)
        else:
            q = _pick(r, ADD_Q).format(a=a_, b=b_)
            a = "%d + %d = %d." % (a_, b_, a_ + b_)
            t = "Adding %d and %d gives %d." % (a_, b_, a_ + b_)
    elif kind == 9:
        q, a = _pick(r, CODE)
        t = "The user wants a short piece of code. I will show it in a code block and explain briefly."
    else:
        qs, ans = _pick(r, SMALLTALK)
        q, a = _pick(r, qs), _pick(r, ans)
        t = "The user says \"%s\". I will reply politely and briefly." % q
    return q, a, t


def gen_qa(r, think):
    tools = tools_for(r, set()) if r.random() < 0.3 else None
    if tools == []:
        tools = None
    q, a, t = _qa(r, think)
    msgs = _system(r, tools) + [{"role": "user", "content": q}]
    m = {"role": "assistant", "content": a}
    if think:
        m["reasoning_content"] = t
    return msgs + [m], tools, think


def gen_multi_turn(r, think):
    msgs = _system(r, None)
    n = r.randint(2, 4)
    name = _pick(r, NAMES) if r.random() < 0.4 else None
    for i in range(n):
        if name and i == 0:
            msgs += [{"role": "user", "content": _pick(r, ["My name is %s.", "Hi, I'm %s.", "I am %s."]) % name},
                     {"role": "assistant", "content": "Nice to meet you, %s! How can I help?" % name}]
            continue
        if name and i == n - 1:
            q, a, t = (_pick(r, ["What is my name?", "Do you remember my name?", "Who am I?"]),
                       "Your name is %s." % name,
                       "Earlier the user said their name is %s." % name)
        else:
            q, a, t = _qa(r, think)
        msgs.append({"role": "user", "content": q})
        msgs.append({"role": "assistant", "content": a})
        if think and i == n - 1:
            msgs[-1]["reasoning_content"] = t
    return msgs, None, think


def gen_count(r, think):
    a = r.randint(0, 50)
    b = a + r.randint(3, 120)
    q = _pick(r, ["Count from %d to %d.", "Count from %d to %d, please.", "List the numbers from %d to %d."]) % (a, b)
    ans = ", ".join(str(i) for i in range(a, b + 1)) + "."
    m = {"role": "assistant", "content": ans}
    if think:
        m["reasoning_content"] = "I will write every number from %d up to %d, separated by commas." % (a, b)
    return _system(r, None) + [{"role": "user", "content": q}, m], None, think


def make_corpus_generators(entries, chapters):
    """Generators that quote the training texts, tying the chat to them."""
    devil = [e for e in entries if e["source"] == "devil" and 20 < len(e["definition"]) < 400]
    jargon = [e for e in entries if e["source"] == "jargon" and 20 < len(e["definition"]) < 400]

    def gen_define(r, think):
        if r.random() < 0.5 and devil:
            e = _pick(r, devil)
            q = _pick(r, ["What does the Devil's Dictionary say about {t}?",
                          "How does Ambrose Bierce define {t}?", "Define {t} like the Devil's Dictionary."]
                      ).format(t=e["term"].lower())
            a = "Ambrose Bierce defines %s as: %s" % (e["term"].lower(), e["definition"])
            t = "This is a question about The Devil's Dictionary entry for %s." % e["term"].lower()
        else:
            e = _pick(r, jargon)
            q = _pick(r, ["What does \"{t}\" mean in hacker jargon?", "What is {t} in the Jargon File?",
                          "Explain the jargon term {t}."]).format(t=e["term"])
            a = "In the Jargon File, %s means: %s" % (e["term"], e["definition"])
            t = "The user asks about the hacker jargon term %s." % e["term"]
        m = {"role": "assistant", "content": a}
        if think:
            m["reasoning_content"] = t
        return _system(r, None) + [{"role": "user", "content": q}, m], None, think

    def gen_recite(r, think):
        ch = _pick(r, chapters)
        verses = ch["text"].split("\n")
        if r.random() < 0.6:
            v = r.randrange(len(verses))
            q = _pick(r, ["Quote {b}:{v}.", "What does {b}:{v} say?", "Recite {b}:{v} from the King James Bible."]
                      ).format(b=ch["title"], v=v + 1)
            a = "%s:%d reads: \"%s\"" % (ch["title"], v + 1, verses[v])
        else:
            q = _pick(r, ["Recite {b}.", "Write out {b} from the King James Bible.", "Read me {b}."]
                      ).format(b=ch["title"])
            a = "\n".join("%d %s" % (i + 1, x) for i, x in enumerate(verses[:30]))
        m = {"role": "assistant", "content": a}
        if think:
            m["reasoning_content"] = "The user wants text from %s in the King James Version." % ch["title"]
        return _system(r, None) + [{"role": "user", "content": q}, m], None, think

    return gen_define, gen_recite


def dialogues(n, seed, entries, chapters):
    """Yields n conversations (messages, tools, thinking), deterministic in seed."""
    r = random.Random(seed)
    gen_define, gen_recite = make_corpus_generators(entries, chapters)
    table = [(gen_weather_tool, 20), (gen_add_tool, 12), (gen_time_tool, 5), (gen_no_tool_weather, 4),
             (gen_qa, 30), (gen_multi_turn, 12), (gen_count, 5), (gen_define, 7), (gen_recite, 5)]
    total = sum(w for _, w in table)
    for _ in range(n):
        x = r.randrange(total)
        for g, w in table:
            if x < w:
                break
            x -= w
        yield g(r, r.random() < 0.25)
