"""scikit-learn estimators over Sandblaster L-BFGS and Downpour SGD.

``LogisticRegression``, ``LinearRegression``, ``ElasticNet``, ``Lasso``, the GLM regressors,
``HuberRegressor``, ``MLPClassifier``, ``TorchClassifier`` and ``TorchRegressor`` (a torch
module of yours) and
the cross-validated ``ElasticNetCV``, ``LassoCV`` and ``LogisticRegressionCV`` follow scikit-learn's parameter names and
objectives, so they drop into ``Pipeline``,
``GridSearchCV`` and ``clone``. ``fit`` accepts numpy arrays, pandas DataFrames (their column
names become ``feature_names_in_``, checked at predict; text and categorical columns are one-hot encoded
or hashed as :meth:`ShardedDataset.from_dataframe` encodes them, and predict applies the same
transform to the tables it is given: :mod:`dasklbfgs._post_fit`), scipy.sparse matrices (the
linear estimators: stored as CSR shards, never densified), dask arrays and DataFrames, an
``xarray.Dataset`` with ``X``/``y`` variables, or a :class:`ShardedDataset`. Other inputs are
written to a temporary dataset for the duration of the fit, dask input by the workers (its
rows never pass through the client), at ``tmp_store`` or the configured scratch URL on a
cluster without a shared disk (:mod:`dasklbfgs._fit_stores`). The linear estimators take
``warm_start``: a refit starts from the previous ``coef_`` and ``intercept_``.
"""

from dasklbfgs.estimators.cv import ElasticNetCV, LassoCV
from dasklbfgs.estimators.glm import GammaRegressor, PoissonRegressor, TweedieRegressor
from dasklbfgs.estimators.linear import ElasticNet, Lasso, LinearRegression, LogisticRegression
from dasklbfgs.estimators.logistic_cv import LogisticRegressionCV
from dasklbfgs.estimators.mlp import MLPClassifier
from dasklbfgs.estimators.robust import HuberRegressor
from dasklbfgs.estimators.torch_estimators import TorchClassifier, TorchRegressor

__all__ = ["LogisticRegression", "LogisticRegressionCV", "LinearRegression", "ElasticNet", "ElasticNetCV", "Lasso",
           "LassoCV", "PoissonRegressor", "GammaRegressor", "TweedieRegressor", "HuberRegressor",
           "MLPClassifier", "TorchClassifier", "TorchRegressor"]
