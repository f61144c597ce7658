"""Real data for the experiments, online or offline, and which data was used.

Every loader tries three sources in order and says which one it used:

1. the Hugging Face hub through ``datasets`` (WikiText-103, Penn Treebank,
   CIFAR-10, ImageNet-1K) — only when the hub answers a 2-second connection
   test, so an offline machine decides in seconds rather than after the hub
   client's retries (and, remembering the answer, at once for the rest of the run);
2. a local directory named by ``CONSLAW_DATA_DIR`` (e.g. ``wikitext-2/valid.txt``,
   or CIFAR-10's ``cifar-10-batches-py``);
3. real data that ships inside an installed package: the English documentation
   of CPython (``pydoc_data.topics``) for text, scikit-learn's handwritten digits
   (``load_digits``, 8×8 grey images, 10 classes) for images.

Never random tokens or noise. Text is tokenized offline at byte level (UTF-8
bytes, a vocabulary of 256), so no tokenizer has to be downloaded.
"""

from __future__ import annotations

import os
import pickle
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

DATA_DIR_VAR = "CONSLAW_DATA_DIR"
VOCAB_SIZE = 256  # byte-level tokens
TEXT_SETS = {  # name → (hub path, hub config, text field); local folders are tried under the same names
    "wikitext-103": ("Salesforce/wikitext", "wikitext-103-raw-v1", "text"),
    "ptb": ("ptb-text-only/ptb_text_only", "penn_treebank", "sentence"),
}
IMAGE_SETS = {  # name → (hub path, image field, label field, number of classes)
    "cifar10": ("uoft-cs/cifar10", "img", "label", 10),
    "imagenet-1k": ("ILSVRC/imagenet-1k", "image", "label", 1000),
}
# WikiText-2's articles are a subset of WikiText-103's (same format), so it stands in for it offline.
_LOCAL_TEXT_DIRS = {"wikitext-103": ("wikitext-103", "wikitext-2"), "ptb": ("ptb", "penn-treebank")}
_LOCAL_TEXT_FILES = ("train.txt", "valid.txt", "test.txt")


@dataclass(frozen=True)
class TextData:
    """Byte tokens ``tokens`` (int64, values < 256) and the ``source`` they came from."""

    tokens: torch.Tensor  # (n,)
    source: str
    vocab_size: int = VOCAB_SIZE


@dataclass(frozen=True)
class ImageData:
    """Images ``x`` (N, C, H, W), standardised per channel, labels ``y`` (N,), and their ``source``."""

    x: torch.Tensor
    y: torch.Tensor
    n_classes: int
    source: str


_UNREACHABLE: set[str] = set()  # endpoints that failed the connection test: not asked again in this process


def hub_reachable(timeout: float = 2.0) -> bool:
    """Whether the Hugging Face hub answers an HTTPS request within ``timeout`` seconds.

    ``False`` at once when ``HF_HUB_OFFLINE`` or ``HF_DATASETS_OFFLINE`` is set, or when this
    endpoint already failed the test in this process (the environment is never written).
    Any HTTP answer counts (even an error status): the hub is there.

    Examples
    ========
    >>> import os
    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"HF_HUB_OFFLINE": "1"}):  # restored on exit
    ...     hub_reachable()
    False
    """
    if any(os.environ.get(v, "").lower() in ("1", "true", "yes") for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")):
        return False
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    if endpoint in _UNREACHABLE:
        return False
    # The name lookup itself can hang without a network, so the test runs in a daemon thread under one deadline.
    answered: list[bool] = []
    asker = threading.Thread(target=lambda: answered.append(_answers(endpoint, timeout)), daemon=True)
    asker.start()
    asker.join(timeout)
    if answered and answered[0]:
        return True
    _UNREACHABLE.add(endpoint)
    return False


def _answers(endpoint: str, timeout: float) -> bool:
    try:
        urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout).close()
    except urllib.error.HTTPError:
        return True  # an error status is still an answer
    except (OSError, ValueError):
        return False
    return True


def encode(text: str) -> torch.Tensor:
    """Byte-level tokens of ``text``: its UTF-8 bytes as int64.

    Examples
    ========
    >>> encode("Hé").tolist()
    [72, 195, 169]
    """
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.int64)


def decode(tokens: torch.Tensor) -> str:
    """The text of byte tokens (invalid UTF-8 replaced).

    Examples
    ========
    >>> decode(encode("Hé"))
    'Hé'
    """
    return bytes(int(t) for t in tokens).decode("utf-8", errors="replace")


def load_text(name: str = "wikitext-103", *, max_bytes: int = 1_000_000) -> TextData:
    """The first ``max_bytes`` byte tokens of text set ``name``, from the hub, ``CONSLAW_DATA_DIR`` or CPython.

    ``name`` is ``"wikitext-103"`` or ``"ptb"``. ``source`` says what was read.

    Examples
    ========
    >>> import os
    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"HF_HUB_OFFLINE": "1"}):
    ...     data = load_text("ptb", max_bytes=1000)
    >>> len(data.tokens), data.source.split(":")[0] in ("local", "package")
    (1000, True)
    """
    if name not in TEXT_SETS:
        raise ValueError(f"unknown text set {name!r}; valid: {', '.join(TEXT_SETS)}")
    if max_bytes < 2:
        raise ValueError(f"max_bytes must be at least 2, got {max_bytes}")
    text, source = _first_found((_text_from_hub, _text_from_dir, _text_from_package), name, max_bytes)
    return TextData(encode(text)[:max_bytes], source)


def _first_found(attempts: tuple, name: str, size: int) -> tuple:
    """The first source in the fallback order (hub, local directory, installed package) that has ``name``."""
    for attempt in attempts:
        found = attempt(name, size)
        if found is not None:
            return found
    raise RuntimeError(f"no source has {name!r}")  # the package source always answers


def _text_from_hub(name: str, max_bytes: int) -> tuple[str, str] | None:
    if not hub_reachable():
        return None
    import datasets

    path, config, field = TEXT_SETS[name]
    stream = datasets.load_dataset(path, config, split="train", streaming=True)
    parts, size = [], 0
    for row in stream:
        parts.append(row[field] if row[field].endswith("\n") else row[field] + "\n")
        size += len(parts[-1])
        if size >= max_bytes:
            break
    return "".join(parts), f"hub:{path}/{config} (train, first {max_bytes} bytes)"


def _text_from_dir(name: str, max_bytes: int) -> tuple[str, str] | None:
    root = os.environ.get(DATA_DIR_VAR)
    if not root:
        return None
    for sub in _LOCAL_TEXT_DIRS[name]:
        folder = Path(root) / sub
        if not folder.is_dir() and Path(root).name == sub:
            folder = Path(root)  # CONSLAW_DATA_DIR may name the data set's own folder
        files = [folder / f for f in _LOCAL_TEXT_FILES if (folder / f).is_file()]
        if files:
            text = "".join(f.read_text(encoding="utf-8") for f in files)
            note = "" if sub == name else f", standing in for {name}"
            return text, f"local:{folder} ({', '.join(f.name for f in files)}{note})"
    return None


def _text_from_package(name: str, max_bytes: int) -> tuple[str, str]:
    from pydoc_data.topics import topics

    text = "\n".join(topics[key] for key in sorted(topics))
    return text, f"package:pydoc_data.topics (CPython's English documentation, standing in for {name})"


def load_images(name: str = "cifar10", *, max_images: int = 2000) -> ImageData:
    """Up to ``max_images`` labelled images of ``name`` from the hub, ``CONSLAW_DATA_DIR`` or scikit-learn.

    ``name`` is ``"cifar10"`` or ``"imagenet-1k"`` (the hub's copy is gated: log in first).
    Offline, the stand-in is scikit-learn's handwritten digits (1797 images, 1×8×8, 10 classes).

    Examples
    ========
    >>> import os
    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"HF_HUB_OFFLINE": "1"}):
    ...     data = load_images(max_images=100)
    >>> data.x.shape[0], data.n_classes, data.source.split(":")[0] in ("local", "package")
    (100, 10, True)
    """
    if name not in IMAGE_SETS:
        raise ValueError(f"unknown image set {name!r}; valid: {', '.join(IMAGE_SETS)}")
    if max_images < 1:
        raise ValueError(f"max_images must be positive, got {max_images}")
    attempts = (_images_from_hub, _images_from_dir, _images_from_package)
    x, y, n_classes, source = _first_found(attempts, name, max_images)  # x: (N, C, H, W) uint8 or float
    x = torch.as_tensor(x[:max_images], dtype=torch.float32)
    mean, std = x.mean(dim=(0, 2, 3), keepdim=True), x.std(dim=(0, 2, 3), keepdim=True)
    return ImageData((x - mean) / std.clamp_min(1e-8), torch.as_tensor(y[:max_images]).long(), n_classes, source)


def _images_from_hub(name: str, max_images: int) -> tuple | None:
    if not hub_reachable():
        return None
    import datasets

    path, image_field, label_field, n_classes = IMAGE_SETS[name]
    rows = list(datasets.load_dataset(path, split="train", streaming=True).take(max_images))
    # ImageNet images differ in size; 64×64 keeps the experiment small.
    images = [
        np.asarray(r[image_field].convert("RGB").resize((32, 32) if name == "cifar10" else (64, 64))) for r in rows
    ]
    x = np.stack(images).transpose(0, 3, 1, 2)  # (N, H, W, C) → (N, C, H, W)
    y = np.array([r[label_field] for r in rows])
    return x, y, n_classes, f"hub:{path} (train, first {len(rows)} images)"


def _images_from_dir(name: str, max_images: int) -> tuple | None:
    root = os.environ.get(DATA_DIR_VAR)
    batch = Path(root or ".") / "cifar-10-batches-py" / "data_batch_1"
    if not root or name != "cifar10" or not batch.is_file():
        return None
    with batch.open("rb") as f:
        raw = pickle.load(f, encoding="bytes")  # CIFAR-10's own python format
    x = np.asarray(raw[b"data"]).reshape(-1, 3, 32, 32)
    return x, np.asarray(raw[b"labels"]), 10, f"local:{batch}"


def _images_from_package(name: str, max_images: int) -> tuple:
    try:
        from sklearn.datasets import load_digits
    except ImportError as err:
        raise RuntimeError(
            f"{name} is out of reach (no hub, no {DATA_DIR_VAR}) and the offline stand-in needs "
            "scikit-learn: pip install scikit-learn"
        ) from err
    digits = load_digits()
    x = digits.images[:, None]  # (N, 8, 8) → (N, 1, 8, 8), values 0..16
    return x, digits.target, 10, f"package:sklearn.datasets.load_digits (handwritten digits, standing in for {name})"
