#!/usr/bin/env bash
# Malformed checkpoints give one clear error line naming the file or field
# and a non-zero exit, never a crash.
set -uo pipefail
: "${EMBER_BIN:?}" "${EMBER_SRC:?}"
src="$EMBER_SRC/tests/golden/dense/qwen3_qknorm"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0

expect() { # name, expected substring, model dir
  local out rc
  out=$("$EMBER_BIN" logits "$3" --ids 1,2,3 --out "$tmp/out.bin" 2>&1); rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 128 ]; then echo "FAIL $1: exit $rc"; fail=1; return; fi
  if [ "$(printf '%s\n' "$out" | wc -l)" -ne 1 ]; then echo "FAIL $1: not one line: $out"; fail=1; return; fi
  case "$out" in *"$2"*) echo "ok   $1: $out";; *) echo "FAIL $1: '$out' lacks '$2'"; fail=1;; esac
}
mk() { rm -rf "$tmp/m"; mkdir -p "$tmp/m"; cp "$src"/config.json "$src"/model.safetensors "$tmp/m/"; }

mk; truncate -s 100000 "$tmp/m/model.safetensors"; expect truncated "outside the data area" "$tmp/m"
mk; python3 - "$tmp/m/model.safetensors" <<'PY'
import sys, struct
p = sys.argv[1]; b = bytearray(open(p, 'rb').read())
b[0:8] = struct.pack('<Q', len(b) * 2)      # header longer than the file
open(p, 'wb').write(b)
PY
expect lying-header "exceeds the file" "$tmp/m"
mk; python3 - "$tmp/m/model.safetensors" <<'PY'
import sys, struct, json
p = sys.argv[1]; b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8+n]); k = 'model.layers.0.mlp.up_proj.weight'
h[k]['dtype'] = 'I32'; h[k]['shape'] = [h[k]['shape'][0], h[k]['shape'][1] // 2]
hb = json.dumps(h).encode(); hb += b' ' * (-len(hb) % 8)
open(p, 'wb').write(struct.pack('<Q', len(hb)) + hb + b[8+n:])
PY
expect wrong-dtype "has dtype I32" "$tmp/m"
mk; python3 - "$tmp/m/model.safetensors" <<'PY'
import sys, struct, json
p = sys.argv[1]; b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8+n]); del h['model.layers.1.self_attn.k_norm.weight']
hb = json.dumps(h).encode(); hb += b' ' * (-len(hb) % 8)
open(p, 'wb').write(struct.pack('<Q', len(hb)) + hb + b[8+n:])
PY
expect missing-tensor "model.layers.1.self_attn.k_norm.weight is missing" "$tmp/m"
mk; sed -i 's/"num_attention_heads": 4/"num_attention_heads": 3/' "$tmp/m/config.json"; expect bad-heads "not a multiple" "$tmp/m"
mk; sed -i 's/"hidden_size": 64/"hidden_size": 96/' "$tmp/m/config.json"; expect wrong-shape "has shape" "$tmp/m"
mk; sed -i 's/"model_type": "qwen3"/"model_type": "gpt2"/; s/Qwen3ForCausalLM/GPT2LMHeadModel/' "$tmp/m/config.json"; expect unknown-type "not supported" "$tmp/m"
mk; echo '{"model_type": "llama", "hidden_size": "big"}' > "$tmp/m/config.json"; expect bad-json-type "must be an integer" "$tmp/m"
mk; echo '{not json' > "$tmp/m/config.json"; expect bad-json "invalid JSON" "$tmp/m"
mk; rm "$tmp/m/config.json"; expect no-config "config.json" "$tmp/m"
mk; sed -i 's/"vocab_size": 352/"vocab_size": 100/' "$tmp/m/config.json"; expect vocab-mismatch "has shape" "$tmp/m"
exit $fail
