"""A table with numeric, boolean and text columns, and scikit-learn's one-hot encoding of its
few-level text column: shared by the ingest and the estimators' tests."""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.preprocessing import OneHotEncoder

CITIES = ["oslo", "paris", "rome"]


def table(n: int = 900, seed: int = 0) -> pd.DataFrame:
    """``n`` rows: age, income, member, city (3 levels and missing values), user (~400
    levels), a text label and a weight."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "age": rng.integers(18, 90, n), "income": rng.normal(size=n), "member": rng.random(n) < 0.5,
        "city": pd.Series(rng.choice([*CITIES, None], n), dtype=object),
        "user": [f"u{i}" for i in rng.integers(0, 400, n)],
        "label": rng.choice(["no", "yes"], n), "w": rng.uniform(0.5, 2.0, n),
    })


def one_hot(df: pd.DataFrame) -> np.ndarray:
    """The city column as scikit-learn's ``OneHotEncoder(handle_unknown="ignore")`` encodes it."""
    encoder = OneHotEncoder(categories=[CITIES], handle_unknown="ignore")
    return encoder.fit_transform(df[["city"]].fillna("missing")).toarray()
