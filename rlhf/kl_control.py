"""The adaptive KL controller shared by PPO (`--target_kl` moves `kl_coef`) and GRPO (`--target_kl` moves `beta`)."""

# The most one update may change the coefficient by: a factor in [1 - MAX_ERROR, 1 + MAX_ERROR].
MAX_ERROR = 0.2


def adaptive_kl_coef(coef, kl, target, n_steps, horizon):
    """One update of the adaptive KL controller (Ziegler et al. 2019, as in OpenRLHF).

    The coefficient moves toward keeping the measured KL at `target`: up when KL is above it, down when below, by the
    factor 1 + e * n_steps / horizon, where e is the proportional error clipped to +-0.2 (n_steps: episodes since the
    last update; horizon: episodes over which to adapt). Ours: n_steps / horizon is capped at 1, so one update changes
    the coefficient by a factor in [0.8, 1.2] whatever the horizon and batch, and a positive coefficient stays
    positive (uncapped, n_steps > 5 x horizon would flip its sign and reward moving away from the reference).
    """
    error = min(max(kl / target - 1.0, -MAX_ERROR), MAX_ERROR)
    return coef * (1.0 + error * min(n_steps / horizon, 1.0))
