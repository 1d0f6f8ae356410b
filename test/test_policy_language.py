import numpy as np
import pytest
import torch

from vla_edge.archs.bundled.language import InstructionEmbedder
from vla_edge.archs.bundled.tokenizer import InstructionTokenizer, minilm_dir
from vla_edge.core.errors import InstructionRefusedError, InvalidObservationError

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def embedder() -> InstructionEmbedder:
    return InstructionEmbedder(max_tokens=32)


def test_minilm_folder_comes_from_the_installed_package() -> None:
    folder = minilm_dir()
    assert (folder / "model.safetensors").is_file()
    assert (folder / "tokenizer.json").is_file()


def test_tokenizer_matches_transformers_auto_tokenizer() -> None:
    from transformers import AutoTokenizer

    text = "Put the red block in the bowl."
    ref = AutoTokenizer.from_pretrained(str(minilm_dir()), local_files_only=True)
    enc = ref(text, padding="max_length", max_length=32, return_tensors="np")
    ids, mask = InstructionTokenizer(32).encode(text)
    np.testing.assert_array_equal(ids, enc["input_ids"])
    np.testing.assert_array_equal(mask, enc["attention_mask"])
    assert ids.dtype == np.int64 and ids.shape == (1, 32)


def test_embedding_is_unit_length_and_separates_instructions(embedder) -> None:
    a = embedder("put the red block in the bowl")
    b = embedder("put the red block into the bowl")
    c = embedder("push the green block to the target")
    assert a.shape == (1, 384)
    assert torch.allclose(a.norm(dim=-1), torch.ones(1), atol=1e-5)
    assert float(a @ b.T) > float(a @ c.T)


def test_embedding_is_cached_per_instruction(embedder) -> None:
    before = embedder.cache_size
    first = embedder("lift the blue block")
    again = embedder("lift the blue block")
    assert again is first
    assert embedder.cache_size == before + 1


def test_padding_does_not_change_the_embedding() -> None:
    short = InstructionEmbedder(max_tokens=16)
    long = InstructionEmbedder(max_tokens=48, encoder=short.encoder)
    text = "stack the red block on the green block"
    torch.testing.assert_close(short(text), long(text), atol=1e-5, rtol=1e-5)


def test_empty_instruction_raises_invalid_observation() -> None:
    with pytest.raises(InvalidObservationError, match="instruction = '  ' is empty"):
        InstructionTokenizer(32).encode("  ")


def test_unknown_tokens_raise_invalid_observation_naming_them() -> None:
    with pytest.raises(InstructionRefusedError, match="unknown token"):
        InstructionTokenizer(32).encode("put the \U0001f916 in the bowl")


def test_too_long_instruction_raises_naming_the_bound() -> None:
    with pytest.raises(InstructionRefusedError, match="max_instruction_tokens = 8"):
        InstructionTokenizer(8).encode("put the red block in the bowl and then lift it up")
