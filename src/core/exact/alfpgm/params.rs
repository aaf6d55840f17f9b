//! ALFPGM's parameters (`AlfpgmParams`, their defaults and checks) and the choice of the
//! subproblem solver (`InnerSolver`).

use crate::core::common::checks::check_positive_finite;
use crate::core::common::error::{Result, SvmError};

/// ALFPGM's parameters (defaults in `Default`).
#[derive(Debug, Clone, PartialEq)]
pub struct AlfpgmParams {
    /// p: pairs per working set (|B| <= 2p).
    pub n_pairs: usize,
    /// MinMaxLimiter: times an index must have been in B before it may be left out for sitting
    /// at a bound without moving.
    pub min_alpha_opt: u32,
    /// Times an index may be in B before it is left out (until the unfiltered fallback).
    pub max_alpha_opt: u32,
    /// Size of the j candidate list (the smallest -y G of I_low); 0 = all of I_low.
    pub min_alpha_check: usize,
    /// A pair is added only while its look-ahead violation is at least this fraction of the
    /// first pair's (p is then a cap): weak pairs cost a kernel row and a gradient update each
    /// and gain next to nothing [RECON; 0 = always p pairs].
    pub pair_ratio: f64,
    /// MinMaxLimiter's "stopped changing" threshold, relative to C.
    pub alpha_delta_threshold: f64,
    /// AL scaling parameter k; 0 = lambda_max(Q_BB) / |B| for each working set.
    pub al_penalty: f64,
    /// AL multiplier updates per working set at most.
    pub al_max_iter: usize,
    /// FISTA iterations per AL subproblem at most.
    pub fista_max_iter: usize,
    /// Floor of the inner tolerance, as a fraction of tol.
    pub inner_tol_factor: f64,
    /// Inner tolerance relative to the violation of the working set.
    pub inner_rel: f64,
    /// Power iterations for lambda_max(Q_BB).
    pub power_iters: usize,
    /// Safety factor on the power-method estimate (which is from below).
    pub lipschitz_safety: f64,
    /// FISTA adaptive restart.
    pub restart: bool,
    /// How the subproblem on B is solved.
    pub inner: InnerSolver,
}

/// The subproblem solver of a working set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InnerSolver {
    /// The paper's: augmented Lagrangian for y^T d = 0, FISTA on the box (steps 3-5).
    Fista,
    /// WSS2 SMO on the subproblem itself, O(|B|) per step from Q_BB [RECON: a9a took 1,365
    /// FISTA iterations of O(|B|^2) per working set, 20% of a fit and all of it on one thread].
    Smo,
}

impl InnerSolver {
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "fista" => Ok(InnerSolver::Fista),
            "smo" => Ok(InnerSolver::Smo),
            other => Err(SvmError::invalid_parameter(
                "inner",
                format!("must be 'fista' or 'smo', got {other:?}"),
            )),
        }
    }
}

impl Default for AlfpgmParams {
    fn default() -> Self {
        AlfpgmParams {
            n_pairs: 50,
            min_alpha_opt: 5,
            max_alpha_opt: 500,
            min_alpha_check: 0,
            pair_ratio: 0.5,
            alpha_delta_threshold: 1e-5,
            al_penalty: 0.0,
            al_max_iter: 20,
            fista_max_iter: 500,
            inner_tol_factor: 0.1,
            inner_rel: 0.1,
            power_iters: 8,
            lipschitz_safety: 1.1,
            restart: true,
            inner: InnerSolver::Smo,
        }
    }
}

impl AlfpgmParams {
    pub fn check(&self) -> Result<()> {
        if self.n_pairs == 0 {
            return Err(SvmError::invalid_parameter("n_pairs", "must be at least 1"));
        }
        if self.max_alpha_opt == 0 {
            return Err(SvmError::invalid_parameter(
                "max_alpha_opt",
                "must be at least 1",
            ));
        }
        if self.min_alpha_opt > self.max_alpha_opt {
            return Err(SvmError::invalid_parameter(
                "min_alpha_opt",
                format!(
                    "must not exceed max_alpha_opt ({} > {})",
                    self.min_alpha_opt, self.max_alpha_opt
                ),
            ));
        }
        if !(self.alpha_delta_threshold.is_finite() && self.alpha_delta_threshold >= 0.0) {
            return Err(SvmError::invalid_parameter(
                "alpha_delta_threshold",
                format!(
                    "must be a finite number >= 0, got {}",
                    self.alpha_delta_threshold
                ),
            ));
        }
        if !(self.pair_ratio.is_finite() && (0.0..1.0).contains(&self.pair_ratio)) {
            return Err(SvmError::invalid_parameter(
                "pair_ratio",
                format!("must lie in [0, 1), got {}", self.pair_ratio),
            ));
        }
        if !(self.al_penalty.is_finite() && self.al_penalty >= 0.0) {
            return Err(SvmError::invalid_parameter(
                "al_penalty",
                format!(
                    "must be a finite number >= 0 (0 = automatic), got {}",
                    self.al_penalty
                ),
            ));
        }
        for (name, v) in [
            ("al_max_iter", self.al_max_iter),
            ("fista_max_iter", self.fista_max_iter),
            ("power_iters", self.power_iters),
        ] {
            if v == 0 {
                return Err(SvmError::invalid_parameter(name, "must be at least 1"));
            }
        }
        check_positive_finite("inner_tol_factor", self.inner_tol_factor)?;
        check_positive_finite("inner_rel", self.inner_rel)?;
        if !(self.lipschitz_safety.is_finite() && self.lipschitz_safety >= 1.0) {
            return Err(SvmError::invalid_parameter(
                "lipschitz_safety",
                format!(
                    "must be a finite number >= 1, got {}",
                    self.lipschitz_safety
                ),
            ));
        }
        Ok(())
    }

    /// How many j candidates the scan keeps per label (`min_alpha_check`, 0 = all of I_low).
    pub(super) fn j_candidates(&self) -> usize {
        if self.min_alpha_check == 0 {
            usize::MAX
        } else {
            self.min_alpha_check.max(1)
        }
    }
}
