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


# The least the controller must be able to move the coefficient over a run for `--target_kl` to mean anything.
MEASURABLE = 0.1


def most_kl_coef_change(updates, per_update, horizon):
    """The most `updates` adaptations of `per_update` episodes each can move the coefficient at `horizon`, as a
    fraction of where it starts: each multiplies it by at most 1 + MAX_ERROR x min(per_update / horizon, 1) (the
    most it can fall, 1 - (1 - MAX_ERROR x ...) ** updates, is less)."""
    return (1.0 + MAX_ERROR * min(per_update / horizon, 1.0)) ** updates - 1.0


def kl_horizon_note(coef_flag, target, updates, per_update, horizon, unit, between):
    """One `note:` line where `--target_kl` cannot move `coef_flag` by MEASURABLE in a run of `updates` adaptations
    that later steps train with (one between each two of its `between`), of `per_update` `unit` each, naming the
    `--kl_horizon` of the run's own length and how far that lets it move; None where it can."""
    if updates < 1:
        return (f"note: --target_kl {target:g} cannot move {coef_flag} in this run: it adapts between {between}, and "
                f"the run has one; train longer, or drop --target_kl")
    reach = most_kl_coef_change(updates, per_update, horizon)
    if reach >= MEASURABLE:
        return None
    own = (updates + 1) * per_update
    own_reach = most_kl_coef_change(updates, per_update, own)
    return (f"note: --target_kl {target:g} can move {coef_flag} by at most {reach:.2%} in this run ({updates} "
            f"adaptation{'s' * (updates != 1)} of {per_update} {unit} at --kl_horizon {horizon}); --kl_horizon {own}, "
            f"the run's own length in {unit}, lets it move by up to {own_reach:.0%}")
