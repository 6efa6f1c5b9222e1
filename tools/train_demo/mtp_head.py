"""mtp_head.py — the Qwen3.5 multi-token-prediction (MTP) head in PyTorch,
computed exactly as ember computes it (src/model/qwen3_5_mtp.c, src/engine/spec.c).

For the pair (token x_{p+1}, trunk hidden state h_p) at position p the head
predicts x_{p+2}:

    e = pre_fc_norm_embedding(embed(x_{p+1}))      embedding first,
    r = pre_fc_norm_hidden(h_p)                    hidden second
    y = fc([e | r])                                [H, 2H] weight
    y = decoder_layer(y)                           gated full attention + SwiGLU MLP,
                                                   causal over the pairs, RoPE position p
    logits = lm_head(norm(y))                      the trunk's head (tied: the embedding)

h_p is the trunk's final-normed hidden state (the output of model.norm). All
RMSNorm gains are zero-centred: x * (1 + gamma), gamma stored (initialised 0),
as transformers stores them; ember adds the 1 at load for checkpoints that carry
mtp.* tensors. The decoder layer is the trunk's full-attention layer:
q_proj writes [query | gate] per head (2 * head_dim each), q and k get a
per-head zero-centred RMSNorm, rotary (neox halves) over the first
rot_dim = int(head_dim * partial_rotary_factor) & ~1 dimensions, GQA,
scale 1/sqrt(head_dim), output * sigmoid(gate), o_proj.

Parameter names are those of the released checkpoints (mtp.fc.weight,
mtp.layers.0.self_attn.q_proj.weight, ...): state_dict() of MTPHead prefixed
with "mtp." is what ember loads.

Needs torch only; imported by train_qwen3_5_mtp.py.
"""
import torch
import torch.nn.functional as F
from torch import nn


class ZeroCentredRMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps) * (1 + weight), in float32 like transformers' Qwen3_5RMSNorm."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * (1.0 + self.weight.float())).type_as(x)


def rope_tables(positions, head_dim, partial, theta, device):
    """cos, sin of shape [T, rot_dim] (the angle table repeated for both halves)."""
    rot = int(head_dim * partial) & ~1
    inv_freq = 1.0 / (theta ** (torch.arange(0, rot, 2, dtype=torch.float32, device=device) / rot))
    ang = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    emb = torch.cat([ang, ang], dim=-1)
    return emb.cos(), emb.sin()


def apply_partial_rope(x, cos, sin):
    """x [B, heads, T, hd]; rotates the first cos.shape[-1] dims in neox halves."""
    rot = cos.shape[-1]
    xr, xp = x[..., :rot], x[..., rot:]
    half = rot // 2
    x1, x2 = xr[..., :half], xr[..., half:]
    rotated = torch.cat([-x2, x1], dim=-1)
    c, s = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([xr * c + rotated * s, xp], dim=-1)


def causal_attention(q, k, v, scale):
    """softmax(q k^T * scale + causal mask) v over [B, heads, T, hd]."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    T = q.shape[-2]  # torch < 2.0
    s = (q @ k.transpose(-1, -2)).float() * scale
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return (s.softmax(-1).to(v.dtype)) @ v


class GatedAttention(nn.Module):
    def __init__(self, H, n_heads, n_kv, hd, eps, bias=False):
        super().__init__()
        self.nh, self.nkv, self.hd = n_heads, n_kv, hd
        self.q_proj = nn.Linear(H, n_heads * hd * 2, bias=bias)
        self.k_proj = nn.Linear(H, n_kv * hd, bias=bias)
        self.v_proj = nn.Linear(H, n_kv * hd, bias=bias)
        self.o_proj = nn.Linear(n_heads * hd, H, bias=bias)
        self.q_norm = ZeroCentredRMSNorm(hd, eps)
        self.k_norm = ZeroCentredRMSNorm(hd, eps)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        qg = self.q_proj(x).view(B, T, self.nh, 2 * self.hd)
        q, gate = qg[..., :self.hd], qg[..., self.hd:]       # per head [query | gate]
        gate = gate.reshape(B, T, self.nh * self.hd)
        q = self.q_norm(q).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, T, self.nkv, self.hd)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)
        q, k = apply_partial_rope(q, cos, sin), apply_partial_rope(k, cos, sin)
        if self.nkv != self.nh:
            rep = self.nh // self.nkv
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        att = causal_attention(q, k, v, self.hd ** -0.5)
        att = att.transpose(1, 2).reshape(B, T, self.nh * self.hd)
        return self.o_proj(att * torch.sigmoid(gate))


class SwiGLU(nn.Module):
    def __init__(self, H, F_):
        super().__init__()
        self.gate_proj = nn.Linear(H, F_, bias=False)
        self.up_proj = nn.Linear(H, F_, bias=False)
        self.down_proj = nn.Linear(F_, H, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MTPDecoderLayer(nn.Module):
    """Pre-norm decoder layer with the names of transformers' Qwen3_5DecoderLayer (full attention)."""

    def __init__(self, H, F_, n_heads, n_kv, hd, eps, bias=False):
        super().__init__()
        self.self_attn = GatedAttention(H, n_heads, n_kv, hd, eps, bias)
        self.mlp = SwiGLU(H, F_)
        self.input_layernorm = ZeroCentredRMSNorm(H, eps)
        self.post_attention_layernorm = ZeroCentredRMSNorm(H, eps)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class MTPHead(nn.Module):
    """One MTP layer; embedding and lm_head are the trunk's, passed in."""

    def __init__(self, cfg):
        super().__init__()
        H, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.head_dim = cfg.head_dim
        rp = cfg.rope_parameters or {}
        self.partial = float(rp.get("partial_rotary_factor", getattr(cfg, "partial_rotary_factor", 0.25)))
        self.theta = float(rp.get("rope_theta", 10000.0))
        self.fc = nn.Linear(2 * H, H, bias=False)
        self.pre_fc_norm_embedding = ZeroCentredRMSNorm(H, eps)
        self.pre_fc_norm_hidden = ZeroCentredRMSNorm(H, eps)
        self.layers = nn.ModuleList([MTPDecoderLayer(H, cfg.intermediate_size, cfg.num_attention_heads,
                                                     cfg.num_key_value_heads, cfg.head_dim, eps,
                                                     bool(getattr(cfg, "attention_bias", False)))])
        self.norm = ZeroCentredRMSNorm(H, eps)

    def init_weights(self, std):
        for n, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, std)
            else:
                nn.init.zeros_(p)

    def hidden(self, next_emb, h, pos0=0):
        """next_emb = embed(x_{p+1}), h = h_p, both [B, T, H] for p = pos0 .. pos0+T-1:
        the head's normed output rows (what ember passes to a further draft step)."""
        T = next_emb.shape[1]
        y = self.fc(torch.cat([self.pre_fc_norm_embedding(next_emb), self.pre_fc_norm_hidden(h)], dim=-1))
        pos = torch.arange(pos0, pos0 + T, device=y.device)
        cos, sin = rope_tables(pos, self.head_dim, self.partial, self.theta, y.device)
        for layer in self.layers:
            y = layer(y, cos, sin)
        return self.norm(y)


def mtp_state_dict(head):
    """The head's tensors under the checkpoint names ember reads (mtp.*)."""
    return {"mtp." + k: v for k, v in head.state_dict().items()}
