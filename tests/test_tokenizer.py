import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from mrp_repro import tokenizer as T
from mrp_repro.tasks.synthetic import alphabet

CHARS = alphabet() + "\n\t"


@pytest.fixture(scope="module")
def tiny():
    return T.build_tiny_tokenizer(CHARS)


def test_tiny_specials_and_ids(tiny):
    assert isinstance(tiny, PreTrainedTokenizerFast)
    assert tiny.convert_tokens_to_ids(["<|pad|>", "<|mask|>", "<|eos|>"]) == [0, 1, 2]
    assert (tiny.pad_token_id, tiny.mask_token_id, tiny.eos_token_id) == (0, 1, 2)
    assert T.mask_token_id(tiny) == 1
    assert T.eos_token_ids(tiny) == [2]
    assert len(tiny) == 3 + len(set(CHARS))


@pytest.mark.parametrize("s", ["Q:a1b0c1d1e3=", "5125    8916    #### 6", "  a \n\n b  ", " ", "e+e+e+a+d+c"])
def test_tiny_round_trip(tiny, s):
    ids = tiny.encode(s, add_special_tokens=False)
    assert len(ids) == len(s)  # one token per character
    assert tiny.decode(ids) == s
    assert tiny.decode(ids + [2, 0], skip_special_tokens=True) == s
    assert tiny.decode(ids + [2]) == s + "<|eos|>"


def test_tiny_save_load(tiny, tmp_path):
    T.save_tokenizer(tiny, tmp_path / "tok")
    for loaded in (T.load_tokenizer(tmp_path / "tok"), AutoTokenizer.from_pretrained(str(tmp_path / "tok"))):
        s = "Q:3+1255....=1255 #### 6"
        assert loaded.encode(s, add_special_tokens=False) == tiny.encode(s, add_special_tokens=False)
        assert loaded.decode(loaded.encode(s, add_special_tokens=False)) == s
        assert T.mask_token_id(loaded) == 1 and loaded.eos_token == "<|eos|>"


def test_mask_lookup_errors_clearly(tiny):
    class NoMask:
        mask_token = None

        def get_added_vocab(self):
            return {}

        def convert_tokens_to_ids(self, t):
            return None

    with pytest.raises(ValueError, match="mask"):
        T.mask_token_id(NoMask())


@pytest.fixture(scope="module")
def qwen():
    return T.build_qwen_tokenizer_offline()


def test_qwen_matches_tiktoken(qwen):
    tiktoken = pytest.importorskip("tiktoken")
    from tiktoken.load import load_tiktoken_bpe

    enc = tiktoken.Encoding(
        "qwen",
        pat_str=T.QWEN_PATTERN,
        mergeable_ranks=load_tiktoken_bpe(str(T._qwen_ranks_file())),
        special_tokens={},
    )
    for s in ["Hello world", "def f(a, b):\n    return a + b  # ok\n\n", "12 + 345 = 357, 你好！"]:
        ids = qwen.encode(s, add_special_tokens=False)
        assert ids == enc.encode(s)
        assert qwen.decode(ids) == s
    assert qwen.encode("Hello world", add_special_tokens=False) == [9707, 1879]


def test_qwen_special_tokens(qwen):
    for i, name in enumerate(T.QWEN3_SPECIALS):
        assert qwen.convert_tokens_to_ids(name) == 151643 + i
    assert qwen.convert_tokens_to_ids("<|MASK|>") == 151669
    assert len(qwen) == 151670
    assert T.mask_token_id(qwen) == 151669
    assert T.eos_token_ids(qwen) == [151645, 151643]
    assert qwen.encode("<|im_start|>user", add_special_tokens=False)[0] == 151644


def test_qwen_chat_template(qwen):
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "2+2?"}]
    text = qwen.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    assert qwen.apply_chat_template(msgs[1:], tokenize=False) == "<|im_start|>user\n2+2?<|im_end|>\n"
