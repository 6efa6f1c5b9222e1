#!/usr/bin/env python3
"""The PyTorch MTP head of tools/train_demo/mtp_head.py against ember's.

Writes a small Qwen3.5 checkpoint with random weights and one MTP layer (a trunk
of full-attention layers only, so the trunk is the same PyTorch layer class),
replays ember's greedy speculative decoding (src/engine/spec.c) in PyTorch,
float64, with that head, and checks that `ember generate --spec mtp` produces
the same tokens and the same number of trunk steps and accepted drafts for
1, 2 and 3 draft tokens. A head computed differently (concat order, norms,
rotary, positions, the hidden state a further draft step reads) drafts other
tokens, and the counts differ.

Usage: mtp_head_parity.py EMBER_BIN WORK_DIR        (needs torch, numpy)
"""
import json
import os
import re
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "train_demo"))

import torch  # noqa: E402
from mtp_head import MTPDecoderLayer, MTPHead, ZeroCentredRMSNorm, mtp_state_dict, rope_tables  # noqa: E402

CFG = dict(model_type="qwen3_5_text", architectures=["Qwen3_5ForCausalLM"], vocab_size=48, hidden_size=64,
           intermediate_size=96, num_hidden_layers=2, layer_types=["full_attention", "full_attention"],
           num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
           tie_word_embeddings=True, max_position_embeddings=1024, mtp_num_hidden_layers=1,
           hidden_act="silu", attention_bias=False, bos_token_id=1, eos_token_id=2,
           linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=16, linear_value_head_dim=16,
           linear_conv_kernel_dim=4,
           rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5})


class Cfg:
    def __init__(self, d):
        self.__dict__.update(d)


class Trunk(torch.nn.Module):
    """Embedding, full-attention decoder layers, final norm; the head is the tied embedding."""

    def __init__(self, c):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = torch.nn.ModuleList([MTPDecoderLayer(c.hidden_size, c.intermediate_size, c.num_attention_heads,
                                                           c.num_key_value_heads, c.head_dim, c.rms_norm_eps)
                                           for _ in range(c.num_hidden_layers)])
        self.norm = ZeroCentredRMSNorm(c.hidden_size, c.rms_norm_eps)
        rp = c.rope_parameters
        self.hd, self.partial, self.theta = c.head_dim, rp["partial_rotary_factor"], rp["rope_theta"]

    def forward(self, ids):
        x = self.embed_tokens(ids)
        cos, sin = rope_tables(torch.arange(ids.shape[1]), self.hd, self.partial, self.theta, "cpu")
        for layer in self.layers:
            x = layer(x, cos, sin)
        h = self.norm(x)
        return h, h @ self.embed_tokens.weight.T


def randomize(module, gen, std, gain_std):
    with torch.no_grad():
        for _, p in module.named_parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (std if p.dim() >= 2 else gain_std))


def bf16_round(module):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(p.to(torch.bfloat16).to(p.dtype))


def distill(trunk, head, c, gen, steps=150):
    """Trains the head briefly to draft the trunk's greedy choice (the pair
    (x_{t+1}, h_t) against argmax of the trunk at t+1), so that drafts are
    often accepted and the counts test the further draft steps too."""
    opt = torch.optim.Adam(head.parameters(), lr=1e-2)
    for _ in range(steps):
        ids = torch.randint(3, c.vocab_size, (8, 48), generator=gen)
        with torch.no_grad():
            h, logits = trunk(ids)
            tgt = logits[:, 1:].argmax(-1)
        hm = head.hidden(trunk.embed_tokens(ids[:, 1:]).detach(), h[:, :-1])
        loss = torch.nn.functional.cross_entropy((hm @ trunk.embed_tokens.weight.detach().T).reshape(-1, c.vocab_size),
                                                 tgt.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return float(loss)


def write_checkpoint(d, trunk, head):
    os.makedirs(d, exist_ok=True)
    tensors = {"model." + k: v for k, v in trunk.state_dict().items()}
    tensors.update(mtp_state_dict(head))
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.bfloat16).contiguous()
        b = t.view(torch.int16).numpy().tobytes()
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj)
        for b in blobs:
            f.write(b)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(CFG, f, indent=1)


def head_rows(trunk, head, toks, hid):
    """The head over pairs (toks[p], hid[p]) at positions 0..len-1: logits and normed rows."""
    e = trunk.embed_tokens(toks)[None]
    hm = head.hidden(e, hid[None])[0]
    return hm @ trunk.embed_tokens.weight.T, hm


def replay(trunk, head, prompt, n_gen, K):
    """Greedy speculative decoding as src/engine/spec.c runs it, by full recomputation.
    Returns (generated ids, trunk steps, drafted, accepted)."""
    seq = list(prompt)
    _, logits = trunk(torch.tensor([seq]))
    out = [int(logits[0, -1].argmax())]
    steps = drafted = accepted = 0
    while len(out) < n_gen:
        x = out[-1]
        N = len(seq)                      # trunk length; x is token N
        k = min(K, n_gen - len(out) - 1)
        full = seq + [x]
        h, _ = trunk(torch.tensor([seq]))
        # pairs p = 0..N-1: (full[p+1], h_p); the last gives the first draft
        toks, hid = list(full[1:]), [h[0, p] for p in range(N)]
        drafts = []
        for j in range(k):
            ml, hm = head_rows(trunk, head, torch.tensor(toks), torch.stack(hid))
            d = int(ml[-1].argmax())
            drafts.append(d)
            toks.append(d)                # a further step: (d_j, the head's own output row)
            hid.append(hm[-1])
        _, vl = trunk(torch.tensor([full + drafts]))
        vl = vl[0, N:]
        steps += 1
        drafted += k
        a, t, done = 0, None, False
        for j in range(k):
            want = int(vl[j].argmax())
            if want != drafts[j]:
                t = want
                break
            a += 1
            out.append(drafts[j])
            if len(out) >= n_gen:
                done = True
                break
        accepted += a
        if done:
            break
        if t is None:
            t = int(vl[k].argmax())
        seq = full + drafts[:a]
        out.append(t)
    return out[:n_gen], steps, drafted, accepted


def ember(bin_, d, prompt, n_gen, K):
    cmd = [bin_, "generate", d, "--ids", ",".join(map(str, prompt)), "--max-tokens", str(n_gen),
           "--temperature", "0", "--ignore-eos", "--print-ids", "--precision", "exact", "--stats"]
    if K:
        cmd += ["--spec", "mtp", "--draft-tokens", str(K)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise SystemExit("ember failed: %s\n%s" % (" ".join(cmd), r.stderr))
    ids = [int(x) for x in r.stdout.split()]
    m = re.search(r"speculative: (\d+) trunk steps, (\d+)/(\d+) drafts accepted", r.stderr)
    counts = (int(m.group(1)), int(m.group(3)), int(m.group(2))) if m else None
    return ids, counts


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    bin_, work = sys.argv[1], sys.argv[2]
    torch.set_default_dtype(torch.float64)
    c = Cfg(CFG)
    gen = torch.Generator().manual_seed(7)
    trunk, head = Trunk(c), MTPHead(c)
    # Random trunk; the head distilled from it, so that its drafts are often right.
    randomize(trunk, gen, 0.25, 0.3)
    randomize(head, gen, 0.1, 0.1)
    bf16_round(trunk)
    distill(trunk, head, c, gen)
    bf16_round(head)
    d = os.path.join(work, "q35_mtp_parity")
    write_checkpoint(d, trunk, head)
    fails = 0
    g = torch.Generator().manual_seed(11)
    for case, (n_prompt, n_gen) in enumerate([(9, 48), (23, 40), (40, 56)]):
        prompt = [int(v) for v in torch.randint(3, c.vocab_size, (n_prompt,), generator=g)]
        with torch.no_grad():
            plain, _ = ember(bin_, d, prompt, n_gen, 0)
            want_plain = replay(trunk, head, prompt, n_gen, 0)[0]
            if plain != want_plain:
                print("FAIL case %d: plain greedy ids differ\n  ember %s\n  torch %s" % (case, plain, want_plain))
                fails += 1
                continue
            for K in (1, 2, 3):
                ids, counts = ember(bin_, d, prompt, n_gen, K)
                want_ids, steps, drafted, accepted = replay(trunk, head, prompt, n_gen, K)
                ok = ids == want_ids and counts == (steps, drafted, accepted)
                print("%s case %d K=%d: ember steps/drafted/accepted %s, PyTorch head %s"
                      % ("ok  " if ok else "FAIL", case, K, counts, (steps, drafted, accepted)))
                if not ok:
                    fails += 1
                    if ids != want_ids:
                        print("  ids differ:\n  ember %s\n  torch %s" % (ids, want_ids))
                elif accepted == 0 or accepted == drafted:
                    print("FAIL case %d K=%d: acceptance %d/%d does not discriminate; retune the weights"
                          % (case, K, accepted, drafted))
                    fails += 1
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
