"""Hugging Face transformer architectures rebuilt in plain ``torch.nn``, op for op as ``transformers`` 4.38 runs them
in eager mode (``attn_implementation="eager"``, training, dropout on), from a ``config.json`` dict: ``GPT2LMHeadModel``,
``OPTForCausalLM`` and ``BertForPreTraining``. They let prenet check its whole-model answers against NeuSight's measured
training steps (``data/external/neusight2025``) without importing ``transformers``.

What each keeps from its source: GPT-2's ``Conv1D`` projections (``addmm`` with an ``(in, out)`` weight), its
``gelu_new`` (tanh form), the causal mask applied with ``torch.where`` and scores divided by √head_dim; OPT's query
scaling, ``bmm`` attention over ``batch × heads``, additive 4-D causal mask and learned positions with offset 2; BERT's
additive extended attention mask, exact GELU, pooler and both pre-training heads. Word embeddings are tied to the LM
head in all three. Parameter counts equal the published checkpoints' (tests/test_transformer_references.py).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

Example = tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]


class Conv1D(nn.Module):
    """GPT-2's projection: ``x @ W + b`` with ``W`` stored ``(in, out)``, as one ``addmm``."""

    def __init__(self, nf: int, nx: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        self.nf = nf

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size_out = x.size()[:-1] + (self.nf,)
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(size_out)


def gelu_new(x: torch.Tensor) -> torch.Tensor:
    """GPT-2's tanh GELU (transformers' ``NewGELUActivation``)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self, d: int, heads: int, positions: int, pdrop: float, attn_pdrop: float):
        super().__init__()
        self.heads, self.head_dim = heads, d // heads
        self.register_buffer(
            "bias", torch.tril(torch.ones(positions, positions, dtype=torch.bool)).view(1, 1, positions, positions), persistent=False
        )
        self.c_attn, self.c_proj = Conv1D(3 * d, d), Conv1D(d, d)
        self.attn_dropout, self.resid_dropout = nn.Dropout(attn_pdrop), nn.Dropout(pdrop)

    def _split(self, t: torch.Tensor) -> torch.Tensor:
        return t.view(t.size()[:-1] + (self.heads, self.head_dim)).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (self._split(t) for t in self.c_attn(x).split(x.size(-1), dim=2))
        w = torch.matmul(q, k.transpose(-1, -2))
        w = w / torch.full([], v.size(-1) ** 0.5, dtype=w.dtype, device=w.device)
        length = q.size(-2)
        mask = self.bias[:, :, :length, :length]
        w = torch.where(mask, w.to(w.dtype), torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype, device=w.device))
        w = self.attn_dropout(nn.functional.softmax(w, dim=-1).type(v.dtype))
        a = torch.matmul(w, v).permute(0, 2, 1, 3).contiguous()
        return self.resid_dropout(self.c_proj(a.view(a.size()[:-2] + (self.heads * self.head_dim,))))


class GPT2Block(nn.Module):
    def __init__(self, d: int, heads: int, positions: int, pdrop: float, eps: float, attn_pdrop: float):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(d, eps=eps), nn.LayerNorm(d, eps=eps)
        self.attn = GPT2Attention(d, heads, positions, pdrop, attn_pdrop)
        self.c_fc, self.c_proj, self.dropout = Conv1D(4 * d, d), Conv1D(d, 4 * d), nn.Dropout(pdrop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attn(self.ln_1(x)) + x
        return x + self.dropout(self.c_proj(gelu_new(self.c_fc(self.ln_2(x)))))


class GPT2LMHeadModel(nn.Module):
    def __init__(self, c: dict[str, Any]):
        super().__init__()
        d, vocab, positions = int(c["n_embd"]), int(c["vocab_size"]), int(c["n_positions"])
        eps, pdrop = float(c.get("layer_norm_epsilon", 1e-5)), float(c.get("resid_pdrop", 0.1))
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(positions, d)
        self.drop = nn.Dropout(float(c.get("embd_pdrop", 0.1)))
        attn_pdrop = float(c.get("attn_pdrop", 0.1))
        self.h = nn.ModuleList(GPT2Block(d, int(c["n_head"]), positions, pdrop, eps, attn_pdrop) for _ in range(int(c["n_layer"])))
        self.ln_f = nn.LayerNorm(d, eps=eps)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(0, ids.size(-1), dtype=torch.long, device=ids.device).unsqueeze(0)
        x = self.drop(self.wte(ids) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x)).flatten(0, 1)  # (batch · length, vocab): the loss's view


class OPTAttention(nn.Module):
    """OPT's attention as transformers' eager mode runs it: ``clamp`` (4.x, the version NeuSight measured) keeps the
    scores above the dtype's minimum with ``torch.max`` after the mask and runs ``bmm`` on ``batch · heads``; without it
    (5.x), scores are ``matmul`` × a scaling of 1 (the query is already scaled), and softmax runs in FP32."""

    def __init__(self, d: int, heads: int, clamp: bool = True):
        super().__init__()
        self.heads, self.head_dim, self.scaling, self.clamp = heads, d // heads, (d // heads) ** -0.5, clamp
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d, d) for _ in range(4))

    def _shape(self, t: torch.Tensor, length: int, bsz: int) -> torch.Tensor:
        return t.view(bsz, length, self.heads, self.head_dim).transpose(1, 2).contiguous()

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        bsz, length, _ = x.size()
        if not self.clamp:
            q = (self.q_proj(x) * self.scaling).view(bsz, -1, self.heads, self.head_dim).transpose(1, 2)
            k = self.k_proj(x).view(bsz, -1, self.heads, self.head_dim).transpose(1, 2)
            v = self.v_proj(x).view(bsz, -1, self.heads, self.head_dim).transpose(1, 2)
            w = torch.matmul(q, k.transpose(-1, -2)) * 1.0 + mask
            w = nn.functional.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
            a = torch.matmul(w, v).transpose(1, 2).contiguous()
            return self.out_proj(a.reshape(bsz, length, -1).contiguous())
        shape = (bsz * self.heads, -1, self.head_dim)
        q = self._shape(self.q_proj(x) * self.scaling, length, bsz).view(*shape)
        k = self._shape(self.k_proj(x), -1, bsz).view(*shape)
        v = self._shape(self.v_proj(x), -1, bsz).view(*shape)
        w = torch.bmm(q, k.transpose(1, 2)).view(bsz, self.heads, length, length) + mask
        w = torch.max(w, torch.tensor(torch.finfo(w.dtype).min, device=w.device)).view(bsz * self.heads, length, length)
        a = torch.bmm(nn.functional.softmax(w, dim=-1), v)  # attention_dropout 0.0 in OPT's configs
        a = a.view(bsz, self.heads, length, self.head_dim).transpose(1, 2).reshape(bsz, length, -1)
        return self.out_proj(a)


class OPTDecoderLayer(nn.Module):
    def __init__(self, d: int, heads: int, ffn: int, pdrop: float, clamp: bool = True):
        super().__init__()
        self.self_attn = OPTAttention(d, heads, clamp)
        self.self_attn_layer_norm, self.final_layer_norm = nn.LayerNorm(d), nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, ffn), nn.Linear(ffn, d)
        self.dropout = nn.Dropout(pdrop)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.dropout(self.self_attn(self.self_attn_layer_norm(x), mask))
        shape = x.shape
        h = x.reshape(-1, x.size(-1))
        h = h + self.dropout(self.fc2(F.relu(self.fc1(self.final_layer_norm(h)))))
        return h.view(shape)


class OPTForCausalLM(nn.Module):
    """Pre-layer-norm OPT (``do_layer_norm_before``), ``word_embed_proj_dim`` = hidden size (no projections);
    ``transformers``: the major version whose eager attention is rebuilt (:class:`OPTAttention`)."""

    def __init__(self, c: dict[str, Any], transformers: int = 4):
        super().__init__()
        d, vocab = int(c["hidden_size"]), int(c["vocab_size"])
        self.embed_tokens = nn.Embedding(vocab, d)
        self.embed_positions = nn.Embedding(int(c["max_position_embeddings"]) + 2, d)  # OPT's offset of 2
        self.dropout = nn.Dropout(float(c.get("dropout", 0.1)))
        self.layers = nn.ModuleList(
            OPTDecoderLayer(d, int(c["num_attention_heads"]), int(c["ffn_dim"]), float(c.get("dropout", 0.1)), clamp=transformers < 5)
            for _ in range(int(c["num_hidden_layers"]))
        )
        self.final_layer_norm = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.embed_tokens.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        bsz, length = ids.shape
        attn = torch.ones(bsz, length, dtype=torch.long, device=ids.device)
        positions = (torch.cumsum(attn, dim=1).type_as(attn) * attn).long() - 1
        x = self.embed_tokens(ids) + self.embed_positions(positions + 2)
        low = torch.finfo(x.dtype).min
        causal = torch.full((length, length), low, device=ids.device).triu(1)
        expanded = (1.0 - attn[:, None, None, :].to(x.dtype)) * low
        mask = causal[None, None].expand(bsz, 1, length, length) + expanded
        x = self.dropout(x)
        for layer in self.layers:
            x = layer(x, mask)
        return self.lm_head(self.final_layer_norm(x)).flatten(0, 1)


class BertLayer(nn.Module):
    def __init__(self, d: int, heads: int, ffn: int, pdrop: float, eps: float, attn_pdrop: float):
        super().__init__()
        self.heads, self.head_dim = heads, d // heads
        self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.attn_dropout = nn.Dropout(attn_pdrop)
        self.attn_out, self.attn_ln, self.attn_out_dropout = nn.Linear(d, d), nn.LayerNorm(d, eps=eps), nn.Dropout(pdrop)
        self.intermediate, self.output = nn.Linear(d, ffn), nn.Linear(ffn, d)
        self.out_ln, self.out_dropout = nn.LayerNorm(d, eps=eps), nn.Dropout(pdrop)

    def _scores(self, t: torch.Tensor) -> torch.Tensor:
        return t.view(t.size()[:-1] + (self.heads, self.head_dim)).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self._scores(self.query(x)), self._scores(self.key(x)), self._scores(self.value(x))
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask
        a = torch.matmul(self.attn_dropout(nn.functional.softmax(s, dim=-1)), v).permute(0, 2, 1, 3).contiguous()
        a = a.view(a.size()[:-2] + (self.heads * self.head_dim,))
        h = self.attn_ln(self.attn_out_dropout(self.attn_out(a)) + x)
        return self.out_ln(self.out_dropout(self.output(F.gelu(self.intermediate(h)))) + h)


class BertForPreTraining(nn.Module):
    """BERT with its masked-LM head (decoder tied to the word embeddings) and next-sentence head; no attention mask
    given, as in NeuSight's runs (BERT then adds an all-zero extended mask)."""

    def __init__(self, c: dict[str, Any]):
        super().__init__()
        d, vocab, eps = int(c["hidden_size"]), int(c["vocab_size"]), float(c.get("layer_norm_eps", 1e-12))
        pdrop = float(c.get("hidden_dropout_prob", 0.1))
        self.word, self.position = nn.Embedding(vocab, d), nn.Embedding(int(c["max_position_embeddings"]), d)
        self.token_type = nn.Embedding(int(c.get("type_vocab_size", 2)), d)
        self.emb_ln, self.emb_dropout = nn.LayerNorm(d, eps=eps), nn.Dropout(pdrop)
        self.layers = nn.ModuleList(
            BertLayer(d, int(c["num_attention_heads"]), int(c["intermediate_size"]), pdrop, eps, float(c.get("attention_probs_dropout_prob", 0.1)))
            for _ in range(int(c["num_hidden_layers"]))
        )
        self.pooler = nn.Linear(d, d)
        self.transform, self.transform_ln = nn.Linear(d, d), nn.LayerNorm(d, eps=eps)
        self.decoder = nn.Linear(d, vocab)
        self.decoder.weight = self.word.weight
        self.seq_relationship = nn.Linear(d, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        bsz, length = ids.shape
        pos = torch.arange(length, device=ids.device).unsqueeze(0)
        types = torch.zeros(bsz, length, dtype=torch.long, device=ids.device)
        x = self.emb_dropout(self.emb_ln(self.word(ids) + self.token_type(types) + self.position(pos)))
        attn = torch.ones(bsz, length, device=ids.device)
        mask = (1.0 - attn[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, mask)
        _nsp = self.seq_relationship(torch.tanh(self.pooler(x[:, 0])))  # next-sentence logits: computed, no loss on them
        return self.decoder(self.transform_ln(F.gelu(self.transform(x)))).flatten(0, 1)


#: ``architectures[0]`` of a config.json → the class built here (NeuSight builds BERT configs as pre-training models)
ARCHITECTURES = {
    "GPT2LMHeadModel": GPT2LMHeadModel,
    "OPTForCausalLM": OPTForCausalLM,
    "BertLMHeadModel": BertForPreTraining,
    "BertForPreTraining": BertForPreTraining,
}


#: architecture → (config key of the layer count, module-name prefix of a layer: ``<prefix><i>.``)
LAYERS = {
    "GPT2LMHeadModel": ("n_layer", "h."),
    "OPTForCausalLM": ("num_hidden_layers", "layers."),
    "BertLMHeadModel": ("num_hidden_layers", "layers."),
    "BertForPreTraining": ("num_hidden_layers", "layers."),
}


#: architecture → config fields whose value must be the one rebuilt here (a config that sets another is refused: the
#: model would silently differ); None: the field must be absent or null
_REBUILT = {
    "GPT2LMHeadModel": {"activation_function": "gelu_new", "n_inner": None},
    "OPTForCausalLM": {"do_layer_norm_before": True, "activation_function": "relu"},
    "BertLMHeadModel": {"hidden_act": "gelu"},
    "BertForPreTraining": {"hidden_act": "gelu"},
}


def _check_rebuilt(arch: str, config: dict[str, Any]) -> None:
    from prenet.errors import PrenetError

    for field, value in _REBUILT[arch].items():
        if field in config and config[field] != value:
            want = "absent (4 × hidden)" if value is None else repr(value)
            raise PrenetError(f"{arch} config field {field}={config[field]!r} is not rebuilt here (only {want}); prenet would build another model")
    if arch == "OPTForCausalLM" and int(config.get("word_embed_proj_dim", config["hidden_size"])) != int(config["hidden_size"]):
        raise PrenetError("OPTForCausalLM config field word_embed_proj_dim differs from hidden_size (projections are not rebuilt here)")


def from_config(config: dict[str, Any], *, batch_size: int, seq_len: int, transformers: int = 4) -> Example:
    """The model ``config`` describes and a batch of ``seq_len`` token ids (all ones, as NeuSight feeds them) with the
    same ids, flattened, as labels: the models return ``(batch · seq_len, vocab)`` logits, the view the LM loss takes.
    ``transformers``: the major version rebuilt, 4 (4.38, as NeuSight measured) or 5 (OPT's attention differs)."""
    arch = str((config.get("architectures") or ["?"])[0])
    if arch not in ARCHITECTURES:
        raise KeyError(f"no rebuilt architecture {arch!r}; choose one of {', '.join(ARCHITECTURES)}")
    _check_rebuilt(arch, config)
    ids = torch.ones(batch_size, seq_len, dtype=torch.long)
    model = ARCHITECTURES[arch](config, transformers=transformers) if arch == "OPTForCausalLM" else ARCHITECTURES[arch](config)
    return model, (ids, ids.flatten())
