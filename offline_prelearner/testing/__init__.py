"""Contract tests for your own prelearner, sampler or connector (dm_env's test-mixin idea).

Two forms of the same checks:

* **pytest mixins.** Subclass one in a ``Test*`` class, say how to build your object, and pytest
  runs every contract test on it::

      from offline_prelearner.testing import PreLearnerContract

      class TestMyPreLearner(PreLearnerContract):
          def make_prelearner(self):
              return MyPreLearner(n_step=3, train_batch_size=32, seed=0)

  :class:`SamplerContract` (``make_sampler``) and :class:`ConnectorContract`
  (``make_connector``) work the same way. Each has a ``make_*`` default for its input data
  (small real episodes, see :func:`example_episodes`) that you override to feed your own.

* **plain functions** ``check_prelearner(factory, batch)``, ``check_sampler(factory)``,
  ``check_connector(factory)`` run all checks and return the names of those that applied; each
  ``check_*`` also runs alone. ``factory`` is a zero-argument callable returning a *fresh* object.

A broken contract raises :class:`ContractError` (an ``AssertionError``) saying what was expected
and what was found. pytest is imported only when a mixin test runs (to skip a check that does not
apply, such as priority feedback for a uniform buffer), never at import time.

One module per contract: :mod:`.prelearner`, :mod:`.sampler`, :mod:`.connector`; the example data
they feed by default in :mod:`.examples`, and what they share (:class:`ContractError`, the
comparisons) in :mod:`.contract`. Import from here.
"""

from .connector import (
    ConnectorContract,
    ConnectorFactory,
    check_connector,
    check_connector_pickles,
    check_connector_rows_and_inputs,
    check_connector_state,
    connector_input,
)
from .contract import ContractError
from .examples import example_episodes, example_rows, example_sample_batch
from .prelearner import (
    REQUIRED_COLUMNS,
    PreLearnerContract,
    PreLearnerFactory,
    check_prelearner,
    check_prelearner_batch_size,
    check_prelearner_deterministic,
    check_prelearner_ledger,
    check_prelearner_output,
    check_prelearner_pickles,
    check_prelearner_priorities,
)
from .sampler import (
    SamplerContract,
    SamplerFactory,
    check_sampler,
    check_sampler_state,
    check_sampler_valid_slots,
)

__all__ = [
    "REQUIRED_COLUMNS",
    "ConnectorContract",
    "ConnectorFactory",
    "ContractError",
    "PreLearnerContract",
    "PreLearnerFactory",
    "SamplerContract",
    "SamplerFactory",
    "check_connector",
    "check_connector_pickles",
    "check_connector_rows_and_inputs",
    "check_connector_state",
    "check_prelearner",
    "check_prelearner_batch_size",
    "check_prelearner_deterministic",
    "check_prelearner_ledger",
    "check_prelearner_output",
    "check_prelearner_pickles",
    "check_prelearner_priorities",
    "check_sampler",
    "check_sampler_state",
    "check_sampler_valid_slots",
    "connector_input",
    "example_episodes",
    "example_rows",
    "example_sample_batch",
]
