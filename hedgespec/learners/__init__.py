"""Drafter selection: base learners, delay reductions, bandit baselines, and the Selector objects."""
from hedgespec.learners.bandits import EXP3SpecSelector, UCBSpecSelector, exp3_loss_estimate
from hedgespec.learners.delay import BoldReduction, QueueReduction
from hedgespec.learners.experts import AdaNormalHedge, Hedge, NormalHedge, normalhedge_scale
from hedgespec.learners.selectors import (
    FixedSelector,
    HedgeSpecSelector,
    RuleSelector,
    Selector,
    make_selector,
)
