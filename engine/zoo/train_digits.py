"""Train the built-in digits CNN deterministically and write ``digits_cnn.pt``.

    python -m inferpool.engine.zoo.train_digits

Needs scikit-learn (the ``test`` extra) for its bundled 8x8 digits data; nothing is
downloaded. Fixed seeds and deterministic kernels make reruns reproduce the same weights on
the same torch build.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from inferpool.engine.zoo.digits import WEIGHTS, DigitsCNN

SEED = 0
HELD_OUT_FRACTION = 0.2
EPOCHS = 30
BATCH_SIZE = 64


def split() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train_x, train_y, test_x, test_y); the same held-out set every time."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = digits.images.astype(np.float32)[:, None, :, :]
    train_x, test_x, train_y, test_y = train_test_split(
        images,
        digits.target,
        test_size=HELD_OUT_FRACTION,
        random_state=SEED,
        stratify=digits.target,
    )
    return (
        torch.from_numpy(train_x),
        torch.from_numpy(train_y).long(),
        torch.from_numpy(test_x),
        torch.from_numpy(test_y).long(),
    )


def accuracy(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor) -> float:
    with torch.inference_mode():
        _, predicted = model.eval()(images)
    return float((predicted == labels).float().mean())


def train() -> float:
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    train_x, train_y, test_x, test_y = split()
    model = DigitsCNN()
    optimiser = torch.optim.Adam(model.parameters(), lr=2e-3)
    loss_fn = nn.CrossEntropyLoss()
    shuffle = torch.Generator().manual_seed(SEED)
    for _ in range(EPOCHS):
        model.train()
        for batch in torch.split(torch.randperm(len(train_x), generator=shuffle), BATCH_SIZE):
            optimiser.zero_grad()
            loss_fn(model.logits(train_x[batch]), train_y[batch]).backward()
            optimiser.step()
    torch.save(model.state_dict(), WEIGHTS)
    return accuracy(model, test_x, test_y)


if __name__ == "__main__":
    print(f"held-out accuracy {train():.4f}; weights written to {WEIGHTS}")
