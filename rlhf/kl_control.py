"""The adaptive KL controller shared by PPO (`--target_kl` moves `kl_coef`) and GRPO (`--target_kl` moves `beta`)."""


def adaptive_kl_coef(coef, kl, target, n_steps, horizon):
    """One update of the adaptive KL controller (Ziegler et al. 2019, as in OpenRLHF).

    The coefficient moves toward keeping the measured KL at `target`: up when KL is above it, down when below.
    The proportional error is clipped to +-0.2, so one update changes the coefficient by at most
    0.2 * n_steps / horizon (n_steps: episodes since the last update; horizon: episodes over which to adapt).
    """
    error = min(max(kl / target - 1.0, -0.2), 0.2)
    return coef * (1.0 + error * n_steps / horizon)
