"""Chapter 06's simulator: speculative decoding, in theory and from scratch.

Modules, one concept each:

``theory``      tokens per verification, walltime improvement and the best speculation length
                (Leviathan et al. 2023; Chen et al. 2023), with a measured verification cost.
``acceptance``  acceptance per draft position from an engine's counters, against the i.i.d. model.
``sampling``    speculative sampling in NumPy on toy bigram models, the exact rule and two broken ones.
``chisquare``   Pearson's goodness-of-fit test with its own incomplete-gamma p-value (no scipy).

Each module's docstring states the simplifications it makes.
"""

from servelab.sim.speculative.acceptance import (
    IidFit,
    accepted_length_histogram,
    conditional_rates,
    iid_alpha,
    iid_fit,
    iid_length_probabilities,
    survival,
)
from servelab.sim.speculative.chisquare import (
    GofResult,
    TooFewCells,
    chi2_critical,
    chi2_log10_sf,
    chi2_sf,
    chi_square_gof,
)
from servelab.sim.speculative.sampling import (
    VARIANTS,
    Step,
    Variant,
    acceptance_probability,
    first_token_distribution,
    generate,
    greedy_continuation,
    sequence_counts,
    sequence_probabilities,
    softmax,
    speculative_step,
)
from servelab.sim.speculative.theory import (
    draft_acceptance_rate,
    expected_tokens,
    leading_kept,
    optimal_k,
    sample_accepted,
    speedup,
    verify_cost_from_times,
)

__all__ = ["VARIANTS", "GofResult", "IidFit", "Step", "TooFewCells", "Variant", "accepted_length_histogram",
           "acceptance_probability", "chi2_critical", "chi2_log10_sf", "chi2_sf", "chi_square_gof",
           "conditional_rates",
           "draft_acceptance_rate", "expected_tokens", "first_token_distribution", "generate", "greedy_continuation",
           "iid_alpha", "iid_fit", "iid_length_probabilities", "leading_kept", "optimal_k", "sample_accepted",
           "sequence_counts",
           "sequence_probabilities", "softmax", "speculative_step", "speedup", "survival", "verify_cost_from_times"]
