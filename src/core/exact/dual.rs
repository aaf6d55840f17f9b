//! The problem every exact solver takes (`DualProblem`, LIBSVM's: the module doc of `smo`
//! states it), its state during a run (`DualState`: dual variables, gradient, positions under
//! shrinking, the working-set rules), what a run returns (`DualSolution`), when it stops
//! (`ExactRun`) and how it reports (`Reporter`). Shared by SMO, ALFPGM and shrinking.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::core::common::error::{Result, SvmError};
use crate::core::common::progress::{Heartbeat, Monitor, Progress};
use crate::core::kernels::kernel_cache::CacheStats;
use crate::core::simd::RowValue;

/// LIBSVM's floor for a non-positive curvature a_ij.
pub const TAU: f64 = 1e-12;

/// The problem both exact solvers take (module doc): one entry per variable in every vector.
#[derive(Debug, Clone)]
pub struct DualProblem {
    /// y_t = +1 or -1.
    pub y: Vec<f64>,
    /// The linear term p.
    pub p: Vec<f64>,
    /// C_t > 0, the upper bound of a_t.
    pub upper: Vec<f64>,
    /// K_tt.
    pub diag: Vec<f64>,
    /// A feasible start (0 <= a0_t <= C_t); None = 0.
    pub start: Option<Vec<f64>>,
    /// The sum of a over each label is fixed on its own (e^T a as well as y^T a: nu-SVC and
    /// nu-SVR, LIBSVM's `Solver_NU`): a step moves two variables of one label, the stopping
    /// rule and the shrinking take each label's m - M, and rho comes with the sum's
    /// multiplier r (`DualSolution::r`).
    pub sum_per_label: bool,
    /// Some(epsilon): epsilon-SVR with one variable per data row (Shevade, Keerthi,
    /// Bhattacharyya & Murthy, IEEE TNN 2000), not LIBSVM's two: beta_t = a_t - a_t* in
    /// [-C_t, C_t] (y_t = +1), the objective 1/2 beta^T K beta + p^T beta + epsilon |beta|_1.
    /// A variable's two violations come from -G_t -+ epsilon by the sign of beta_t
    /// (`DualState::up_value` / `low_value`), so scans, gradient updates and kernel rows run
    /// over n entries where the two-variable form takes 2n.
    pub tube: Option<f64>,
    /// nu-SVR's two variables per data row kept at one position (with `sum_per_label`): position
    /// t holds a_t (label +1, linear term p_t) and a_t* (label -1, linear term -p_t), both in
    /// [0, C_t], and one gradient F = K (a - a*) + p (a_t's gradient; a_t*'s is -F_t), so scans,
    /// gradient updates and kernel rows run over the n data rows where LIBSVM's form takes 2n.
    /// Both labels' violation value at t is -F_t; a pair step moves two variables of one label.
    /// y is all +1 (the positions'); `start` holds (a, a*), 2n long. ALFPGM only.
    pub paired: bool,
    /// The gradient of `start` and its G_bar (`DualState::grad_bar`, empty when not kept),
    /// when the caller knows them: a start derived from another solution of the same rows
    /// (`StartFrom`) skips the kernel rows that `smo::start_state` would compute for Q a0.
    pub start_gradient: Option<(Vec<f64>, Vec<f64>)>,
}

impl DualProblem {
    /// C-SVC: p = -e, a0 = 0.
    pub fn classification(y: Vec<f64>, upper: Vec<f64>, diag: Vec<f64>) -> Self {
        let p = vec![-1.0; y.len()];
        DualProblem {
            y,
            p,
            upper,
            diag,
            start: None,
            sum_per_label: false,
            tube: None,
            paired: false,
            start_gradient: None,
        }
    }

    /// The lower bound of variable t: -C_t with a tube (beta), 0 otherwise.
    #[inline]
    fn lower(&self, t: usize) -> f64 {
        if self.tube.is_some() {
            -self.upper[t]
        } else {
            0.0
        }
    }

    pub fn n(&self) -> usize {
        self.y.len()
    }

    /// Whether every vector has one entry per variable, the bounds are positive and the start
    /// inside them.
    pub fn check(&self) -> Result<()> {
        let n = self.y.len();
        let copies = if self.paired { 2 } else { 1 };
        let start_ok = self.start.as_ref().is_none_or(|a| {
            a.len() == copies * n
                && a.iter()
                    .zip(self.upper.iter().cycle())
                    .enumerate()
                    .all(|(t, (&a, &c))| a.is_finite() && (self.lower(t % n)..=c).contains(&a))
        });
        if self.p.len() != n || self.upper.len() != n || self.diag.len() != n || !start_ok {
            return Err(SvmError::invalid_input(
                "the dual problem's vectors differ in length or its start is outside the box",
            ));
        }
        if !self.upper.iter().all(|&c| c.is_finite() && c > 0.0)
            || !self.p.iter().all(|v| v.is_finite())
            || !self.y.iter().all(|&v| v == 1.0 || v == -1.0)
        {
            return Err(SvmError::invalid_input(
                "the dual problem needs positive finite bounds, a finite linear term and labels +-1",
            ));
        }
        if let Some(eps) = self.tube {
            if !(eps.is_finite() && eps >= 0.0) || self.sum_per_label || self.y.contains(&-1.0) {
                return Err(SvmError::invalid_input(
                    "a tube needs a finite epsilon >= 0, labels +1 and no sum per label",
                ));
            }
        }
        if self.paired && (!self.sum_per_label || self.tube.is_some() || self.y.contains(&-1.0)) {
            return Err(SvmError::invalid_input(
                "paired variables need a sum per label, no tube and positions of label +1",
            ));
        }
        Ok(())
    }
}

/// The element type of a problem's kernel rows (`simd::RowValue`; the cache, the stores and the
/// solvers are compiled for each). f32, as LIBSVM's `Qfloat`, unless its rounding moves the
/// gradient by more than the tolerance while f64's does not: a kernel value K_ts is kept to
/// within `F32_ROUNDING` K_max (K_max the largest K_tt, which bounds every |K_ts| of a
/// positive semi-definite kernel), and a variable at its bound C_t carries that error times
/// C_t into every entry of G. With K_max C_max `F32_ROUNDING` above tol, f32 rows define
/// another problem than the one asked for, and the solver stops at that problem's optimum, or
/// never (scikit-learn's polynomial SVR example: K up to 1.76e4, C = 100, 0.1 against tol
/// 1e-3; f32 rows turn K's zero eigenvalues into ones down to -1.5e-3, and every f32 solver,
/// LIBSVM's too, ran 10^7 steps to a model 0.17 from the optimum). The Gaussian kernel's
/// K_max = 1 keeps f32 up to C = tol / `F32_ROUNDING` (16,777 at tol 1e-3).
///
/// f64 rows help while f64's rounding, 2^29 times finer, stays below tol after the gradient
/// has taken the updates of a run: G is updated once per step and its errors add up like a
/// random walk, about sqrt(10^7) = 2^11.6 times one update's at the default iteration cap. So
/// f64 is taken while K_max C_max `F32_ROUNDING` / tol <= `F64_REACH` = 2^17; beyond it
/// neither type holds the problem (scikit-learn's `check_fit_idempotent`: a cubic kernel of
/// points near (100, 100), K up to 10^12, whose eigenvalues span 10^16, on which SMO with f64
/// rows crawled 10^7 steps without nearing tol) and the rows stay f32, LIBSVM's, whose
/// solver gives what scikit-learn gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowPrecision {
    F32,
    F64,
}

/// f32's rounding of a kernel value, relative to the value (half an ulp, 2^-24).
pub const F32_ROUNDING: f64 = 1.0 / (1u64 << 24) as f64;

/// How far beyond tol f32's rounding may go for f64 rows to hold the problem (`RowPrecision`).
pub const F64_REACH: f64 = (1u64 << 17) as f64;

impl RowPrecision {
    /// The rows a problem of largest diagonal entry `diag_max` and largest bound `upper_max`
    /// needs at tolerance `tol` (the type doc's rule).
    pub fn needed(diag_max: f64, upper_max: f64, tol: f64) -> Self {
        let excess = diag_max.abs() * upper_max * F32_ROUNDING / tol;
        if excess > 1.0 && excess <= F64_REACH {
            RowPrecision::F64
        } else {
            RowPrecision::F32
        }
    }
}

/// The state of a dual problem: labels, linear term, box bounds, the kernel's diagonal, dual
/// variables and the gradient G = Q a + p.
#[derive(Debug, Clone)]
pub struct DualState {
    pub y: Vec<f64>,
    pub alpha: Vec<f64>,
    pub grad: Vec<f64>,
    /// C_t, the upper bound of each a_t.
    pub upper: Vec<f64>,
    /// The linear term p_t.
    pub p: Vec<f64>,
    /// K_tt.
    pub diag: Vec<f64>,
    /// Whether every K_tt is the same (the RBF kernel's 1): scans can then skip reading them.
    pub equal_diag: bool,
    /// Positions 0..active are optimised; the rest are shrunk (their gradient is stale until
    /// `shrinking::reconstruct_gradient`). Every scan below covers the active positions only.
    pub active: usize,
    /// Position -> the variable's index in the problem as given (shrinking permutes positions).
    pub index: Vec<u32>,
    /// G_bar_t = sum over the variables s at their upper bound of C_s Q_ts (LIBSVM's G_bar;
    /// with a tube, at -C_s too: `bound_part`); empty when not shrinking.
    pub grad_bar: Vec<f64>,
    /// `DualProblem::sum_per_label`.
    pub sum_per_label: bool,
    /// `DualProblem::tube`: the variables are beta_t in [-C_t, C_t] with the term tube |beta_t|.
    pub signed: bool,
    /// epsilon of `DualProblem::tube`; 0 without one.
    pub tube: f64,
    /// `DualProblem::paired`: `alpha` holds a_t, `alpha_star` a_t*, `grad` F_t.
    pub paired: bool,
    /// a_t* of the paired form; empty otherwise.
    pub alpha_star: Vec<f64>,
}

/// The label index of y = +1 (0) and y = -1 (1) in per-label arrays.
#[inline]
pub fn label_index(y: f64) -> usize {
    usize::from(y < 0.0)
}

impl DualState {
    /// a = a0 (0 unless given) and G = p: the gradient of a non-zero start still lacks Q a0,
    /// which `start_gradient` adds from kernel rows.
    pub fn new(problem: DualProblem) -> Self {
        let DualProblem {
            y,
            p,
            upper,
            diag,
            start,
            sum_per_label,
            tube,
            paired,
            start_gradient: _,
        } = problem;
        let n = y.len();
        let (alpha, alpha_star) = match (start, paired) {
            (Some(mut a), true) => {
                let star = a.split_off(n);
                (a, star)
            }
            (None, true) => (vec![0.0; n], vec![0.0; n]),
            (start, false) => (start.unwrap_or_else(|| vec![0.0; n]), Vec::new()),
        };
        DualState {
            sum_per_label,
            signed: tube.is_some(),
            tube: tube.unwrap_or(0.0),
            paired,
            alpha,
            alpha_star,
            grad: p.clone(),
            y,
            p,
            upper,
            equal_diag: diag.windows(2).all(|w| w[0] == w[1]),
            diag,
            active: n,
            index: (0..n as u32).collect(),
            grad_bar: Vec::new(),
        }
    }

    /// A C-SVC state at a = 0 (G = -e), for tests and callers holding labels and bounds only.
    pub fn classification(y: Vec<f64>, upper: Vec<f64>, diag: Vec<f64>) -> Self {
        Self::new(DualProblem::classification(y, upper, diag))
    }

    /// Exchanges the variables at two positions (the kernel-row cache must swap the same).
    pub fn swap(&mut self, a: usize, b: usize) {
        self.y.swap(a, b);
        self.alpha.swap(a, b);
        if self.paired {
            self.alpha_star.swap(a, b);
        }
        self.grad.swap(a, b);
        self.upper.swap(a, b);
        self.p.swap(a, b);
        self.diag.swap(a, b);
        self.index.swap(a, b);
        if !self.grad_bar.is_empty() {
            self.grad_bar.swap(a, b);
        }
    }

    /// Puts the variables back in the order they were given.
    fn into_original_order(mut self) -> Self {
        let index = std::mem::take(&mut self.index);
        let unpermute = |v: &mut Vec<f64>| {
            if v.len() == index.len() {
                let mut out = vec![0.0; v.len()];
                for (p, &k) in index.iter().enumerate() {
                    out[k as usize] = v[p];
                }
                *v = out;
            }
        };
        unpermute(&mut self.alpha);
        unpermute(&mut self.alpha_star);
        unpermute(&mut self.y);
        unpermute(&mut self.grad);
        unpermute(&mut self.upper);
        unpermute(&mut self.p);
        unpermute(&mut self.diag);
        unpermute(&mut self.grad_bar);
        self.index = (0..index.len() as u32).collect();
        self
    }

    pub fn n(&self) -> usize {
        self.y.len()
    }

    /// The lower bound of a_t: -C_t for a signed variable, 0 otherwise.
    #[inline]
    pub fn lower(&self, t: usize) -> f64 {
        if self.signed {
            -self.upper[t]
        } else {
            0.0
        }
    }

    /// A paired position holds two variables: `paired_sets` and -F_t answer per label, never
    /// the per-variable `in_up` / `in_low` / `up_value` / `low_value`.
    #[inline]
    fn debug_assert_unpaired(&self) {
        debug_assert!(!self.paired, "a variable's sets asked of a paired position");
    }

    #[inline]
    pub fn in_up(&self, t: usize) -> bool {
        self.debug_assert_unpaired();
        if self.signed {
            self.up_entry::<true>(t).is_some()
        } else {
            self.up_entry::<false>(t).is_some()
        }
    }

    #[inline]
    pub fn in_low(&self, t: usize) -> bool {
        self.debug_assert_unpaired();
        if self.signed {
            self.low_entry::<true>(t).is_some()
        } else {
            self.low_entry::<false>(t).is_some()
        }
    }

    /// Strictly inside the box and, with a tube, off its kink at 0 (paired: either of the
    /// position's variables): the variables whose coefficient the gradient of shrunk positions
    /// needs (`shrinking::reconstruct_gradient`, `free_part`).
    #[inline]
    pub fn is_free(&self, t: usize) -> bool {
        let (a, c) = (self.alpha[t], self.upper[t]);
        if self.paired {
            let s = self.alpha_star[t];
            return (a > 0.0 && a < c) || (s > 0.0 && s < c);
        }
        a > self.lower(t) && a < c && a != 0.0
    }

    /// The paired form's index sets at position t: (in I_up, in I_low) of a_t (label +1,
    /// `label_index` 0) and of a_t* (label -1); both variables' value is -F_t.
    #[inline]
    pub fn paired_sets(&self, t: usize) -> [(bool, bool); 2] {
        let (a, s, c) = (self.alpha[t], self.alpha_star[t], self.upper[t]);
        [(a < c, a > 0.0), (s > 0.0, s < c)]
    }

    /// Variable t's (or, paired, position t's) coefficient in the gradient, y_t a_t
    /// (paired: a_t - a_t*).
    #[inline]
    pub fn coefficient(&self, t: usize) -> f64 {
        if self.paired {
            self.alpha[t] - self.alpha_star[t]
        } else {
            self.alpha[t] * self.y[t]
        }
    }

    /// The part of `coefficient` that G_bar does not hold: that of the free variables.
    #[inline]
    pub fn free_part(&self, t: usize) -> f64 {
        let c = self.upper[t];
        let free = |a: f64| if a > 0.0 && a < c { a } else { 0.0 };
        if self.paired {
            free(self.alpha[t]) - free(self.alpha_star[t])
        } else if self.is_free(t) {
            self.alpha[t] * self.y[t]
        } else {
            0.0
        }
    }

    /// What t adds to G_bar now: C_t y_t at its upper bound, -C_t y_t at a signed lower bound,
    /// 0 elsewhere (paired: C_t for a_t = C_t less C_t for a_t* = C_t).
    #[inline]
    pub fn bound_part(&self, t: usize) -> f64 {
        let (a, c) = (self.alpha[t], self.upper[t]);
        if self.paired {
            let at_c = |v: f64| if v >= c { c } else { 0.0 };
            return at_c(a) - at_c(self.alpha_star[t]);
        }
        if a >= c {
            c * self.y[t]
        } else if self.signed && a <= -c {
            -c * self.y[t]
        } else {
            0.0
        }
    }

    /// The violation value of t as a member of I_up: -y_t G_t, the descent per unit of a step
    /// that raises y_t a_t (with a tube less epsilon at beta_t >= 0, plus it below 0).
    #[inline]
    pub fn up_value(&self, t: usize) -> f64 {
        self.debug_assert_unpaired();
        let v = -self.y[t] * self.grad[t];
        if self.signed {
            v + tube_shifts(self.alpha[t], self.tube).0
        } else {
            v
        }
    }

    /// The violation value of t as a member of I_low: -y_t G_t (with a tube less epsilon at
    /// beta_t > 0, plus it at or below 0). At beta_t = 0 the two values differ by 2 epsilon:
    /// a data row inside the tube violates nothing.
    #[inline]
    pub fn low_value(&self, t: usize) -> f64 {
        self.debug_assert_unpaired();
        let v = -self.y[t] * self.grad[t];
        if self.signed {
            v + tube_shifts(self.alpha[t], self.tube).1
        } else {
            v
        }
    }

    /// (m(a), M(a)) over the full (unfiltered) index sets of the active positions; -inf / +inf
    /// for an empty set. With a sum per label, those of the label whose m - M is largest.
    pub fn extremes(&self) -> (f64, f64) {
        let by_label = self.extremes_by_label();
        if !self.sum_per_label {
            return by_label[0];
        }
        let gap = |(m, big_m): (f64, f64)| m - big_m;
        if gap(by_label[1]) > gap(by_label[0]) {
            by_label[1]
        } else {
            by_label[0]
        }
    }

    /// (m, M) of each label (`label_index`) with a sum per label; otherwise (m(a), M(a)) of all
    /// variables first.
    pub fn extremes_by_label(&self) -> [(f64, f64); 2] {
        let mut out = [(f64::NEG_INFINITY, f64::INFINITY); 2];
        if self.paired {
            for t in 0..self.active {
                let v = -self.grad[t];
                for (e, (up, low)) in out.iter_mut().zip(self.paired_sets(t)) {
                    if up {
                        e.0 = e.0.max(v);
                    }
                    if low {
                        e.1 = e.1.min(v);
                    }
                }
            }
            return out;
        }
        for t in 0..self.active {
            let e = &mut out[if self.sum_per_label {
                label_index(self.y[t])
            } else {
                0
            }];
            if self.in_up(t) {
                e.0 = e.0.max(self.up_value(t));
            }
            if self.in_low(t) {
                e.1 = e.1.min(self.low_value(t));
            }
        }
        out
    }

    /// The maximal violation m(a) - M(a) (negative infinity when a set is empty); with a sum
    /// per label, the larger of the labels' (LIBSVM's `Solver_NU` stopping rule).
    pub fn gap(&self) -> f64 {
        let (m, big_m) = self.extremes();
        m - big_m
    }

    /// The bias rho as LIBSVM's `calculate_rho`: the mean of y_i G_i over free variables, or the
    /// middle of the feasible interval when no variable is free. Decision f(x) = sum a_i y_i k - rho.
    pub fn rho(&self) -> f64 {
        self.rho_and_r().0
    }

    /// rho, and with a sum per label the multiplier r of the sum (LIBSVM's `Solver_NU::
    /// calculate_rho`: r_1, r_2 per label as rho above, rho = (r_1 - r_2) / 2, r = (r_1 + r_2)
    /// / 2); r = 0 otherwise.
    pub fn rho_and_r(&self) -> (f64, f64) {
        if !self.sum_per_label {
            return (self.rho_of(None), 0.0);
        }
        let (r1, r2) = (self.rho_of(Some(1.0)), self.rho_of(Some(-1.0)));
        ((r1 - r2) / 2.0, (r1 + r2) / 2.0)
    }

    /// `calculate_rho` over the variables of one label (in G, not y G: LIBSVM's r_1, r_2), or
    /// over all.
    fn rho_of(&self, label: Option<f64>) -> f64 {
        let (mut ub, mut lb) = (f64::INFINITY, f64::NEG_INFINITY);
        let (mut n_free, mut sum_free) = (0usize, 0.0);
        for t in 0..self.active {
            if label.is_some_and(|l| l != self.y[t]) && !self.paired {
                continue;
            }
            if let Some(l) = label {
                // One label's r is C-SVC's rule for y = +1 applied to G, whatever the label
                // (paired: a_t's G is F_t, a_t*'s -F_t).
                let (a, g) = match (self.paired, l > 0.0) {
                    (true, false) => (self.alpha_star[t], -self.grad[t]),
                    _ => (self.alpha[t], self.grad[t]),
                };
                if a >= self.upper[t] {
                    lb = lb.max(g);
                } else if a <= 0.0 {
                    ub = ub.min(g);
                } else {
                    n_free += 1;
                    sum_free += g;
                }
                continue;
            }
            // y_t G_t bounds rho from above where t can only rise in y a (I_up alone), from
            // below where it can only fall (I_low alone); a tube's kink at 0 does both, by
            // its two values.
            match (self.in_up(t), self.in_low(t)) {
                (true, true) if !(self.signed && self.alpha[t] == 0.0) => {
                    n_free += 1;
                    sum_free += -self.up_value(t);
                }
                (up, low) => {
                    if up {
                        ub = ub.min(-self.up_value(t));
                    }
                    if low {
                        lb = lb.max(-self.low_value(t));
                    }
                }
            }
        }
        if n_free > 0 {
            sum_free / n_free as f64
        } else {
            (ub + lb) / 2.0
        }
    }

    /// f(a) = 1/2 a^T Q a + p^T a = sum_i a_i (G_i + p_i) / 2 (LIBSVM's `obj`), plus
    /// epsilon |a|_1 with a tube.
    pub fn objective(&self) -> f64 {
        if self.paired {
            // a_t (F_t + p_t) + a_t* (-F_t - p_t) per position.
            return (0..self.n())
                .map(|t| self.coefficient(t) * (self.grad[t] + self.p[t]))
                .sum::<f64>()
                / 2.0;
        }
        let quadratic = self
            .alpha
            .iter()
            .zip(&self.grad)
            .zip(&self.p)
            .map(|((a, g), p)| a * (g + p))
            .sum::<f64>()
            / 2.0;
        if self.signed {
            quadratic + self.tube * self.alpha.iter().map(|a| a.abs()).sum::<f64>()
        } else {
            quadratic
        }
    }

    pub fn n_sv(&self) -> usize {
        if self.paired {
            return (0..self.n())
                .filter(|&t| self.coefficient(t) != 0.0)
                .count();
        }
        self.alpha.iter().filter(|&&a| a != 0.0).count()
    }

    /// The i of WSS2: argmax over I_up of -y_t G_t (ties to the last index, as LIBSVM).
    pub fn select_i(&self) -> Option<(usize, f64)> {
        self.select_i_of(None)
    }

    /// `select_i` among the variables of one label (None: all).
    pub fn select_i_of(&self, label: Option<f64>) -> Option<(usize, f64)> {
        if self.signed {
            self.select_i_in::<true>(label)
        } else {
            self.select_i_in::<false>(label)
        }
    }

    /// t's value in I_up, None outside it; `TUBE` = `signed`, fixed per scan so the scans
    /// over the box form keep their loop (`up_value` is the same without the type parameter).
    #[inline(always)]
    fn up_entry<const TUBE: bool>(&self, t: usize) -> Option<f64> {
        let a = self.alpha[t];
        if TUBE {
            let v = -self.grad[t] + tube_shifts(a, self.tube).0;
            (a < self.upper[t]).then_some(v)
        } else {
            let inside = if self.y[t] > 0.0 {
                a < self.upper[t]
            } else {
                a > 0.0
            };
            inside.then(|| -self.y[t] * self.grad[t])
        }
    }

    /// t's value in I_low, None outside it (`up_entry`).
    #[inline(always)]
    fn low_entry<const TUBE: bool>(&self, t: usize) -> Option<f64> {
        let a = self.alpha[t];
        if TUBE {
            let v = -self.grad[t] + tube_shifts(a, self.tube).1;
            (a > -self.upper[t]).then_some(v)
        } else {
            let inside = if self.y[t] > 0.0 {
                a > 0.0
            } else {
                a < self.upper[t]
            };
            inside.then(|| -self.y[t] * self.grad[t])
        }
    }

    fn select_i_in<const TUBE: bool>(&self, label: Option<f64>) -> Option<(usize, f64)> {
        let mut best: Option<(usize, f64)> = None;
        let mut gmax = f64::NEG_INFINITY;
        for t in 0..self.active {
            if label.is_some_and(|l| l != self.y[t]) {
                continue;
            }
            if let Some(v) = self.up_entry::<TUBE>(t) {
                if v >= gmax {
                    gmax = v;
                    best = Some((t, v));
                }
            }
        }
        best
    }

    /// The j of WSS2 for i with -y_i G_i = `gmax` and kernel row K[i, :]: argmin over
    /// t in I_low with b_it = gmax + y_t G_t > 0 of -b_it^2 / a_it, a_it = K_ii + K_tt - 2 K_it
    /// (TAU when not positive). Also returns -M(a) = max over I_low of y_t G_t.
    pub fn select_j<T: RowValue>(&self, i: usize, gmax: f64, row_i: &[T]) -> (Option<usize>, f64) {
        let (best, gmax2) = self.select_j_of(i, gmax, row_i, None);
        (best.map(|(j, _)| j), gmax2)
    }

    /// `select_j` among the variables of one label (None: all), with the j's -b^2 / a.
    pub fn select_j_of<T: RowValue>(
        &self,
        i: usize,
        gmax: f64,
        row_i: &[T],
        label: Option<f64>,
    ) -> (Option<(usize, f64)>, f64) {
        if self.signed {
            self.select_j_in::<true, _>(i, gmax, row_i, label)
        } else {
            self.select_j_in::<false, _>(i, gmax, row_i, label)
        }
    }

    #[allow(clippy::needless_range_loop)] // five arrays indexed by t
    fn select_j_in<const TUBE: bool, T: RowValue>(
        &self,
        i: usize,
        gmax: f64,
        row_i: &[T],
        label: Option<f64>,
    ) -> (Option<(usize, f64)>, f64) {
        let k_ii = self.diag[i];
        let mut gmax2 = f64::NEG_INFINITY;
        let mut best = None;
        let mut obj_min = f64::INFINITY;
        for t in 0..self.active {
            if label.is_some_and(|l| l != self.y[t]) {
                continue;
            }
            let Some(v) = self.low_entry::<TUBE>(t) else {
                continue;
            };
            let yg = -v;
            if yg >= gmax2 {
                gmax2 = yg;
            }
            let b = gmax + yg;
            if b > 0.0 {
                let a = k_ii + self.diag[t] - 2.0 * row_i[t].widen();
                let a = if a > 0.0 { a } else { TAU };
                let obj = -(b * b) / a;
                if obj <= obj_min {
                    obj_min = obj;
                    best = Some((t, obj));
                }
            }
        }
        (best, gmax2)
    }

    /// LIBSVM's analytic two-variable step on (i, j) with their kernel rows (at least the active
    /// prefix), then the gradient update G_k += y_k (y_i da_i K_ik + y_j da_j K_jk) over the active
    /// positions. Returns (da_i, da_j).
    pub fn smo_step<T: RowValue>(
        &mut self,
        i: usize,
        j: usize,
        row_i: &[T],
        row_j: &[T],
    ) -> (f64, f64) {
        if self.signed {
            return self.tube_step(i, j, row_i, row_j);
        }
        let (c_i, c_j) = (self.upper[i], self.upper[j]);
        let (yi, yj) = (self.y[i], self.y[j]);
        let k_ij = row_i[j].widen();
        let (old_i, old_j) = (self.alpha[i], self.alpha[j]);
        let (gi, gj) = (self.grad[i], self.grad[j]);
        let (mut ai, mut aj) = (old_i, old_j);
        // Q_ii + Q_jj - 2 y_i y_j Q_ij, the curvature along the pair's direction.
        let quad = self.diag[i] + self.diag[j] - 2.0 * k_ij;
        let quad = if quad > 0.0 { quad } else { TAU };
        // The clipping of LIBSVM's Solver::Solve, with a bound per variable.
        if yi != yj {
            let delta = (-gi - gj) / quad;
            let diff = ai - aj;
            ai += delta;
            aj += delta;
            if diff > 0.0 {
                if aj < 0.0 {
                    aj = 0.0;
                    ai = diff;
                }
            } else if ai < 0.0 {
                ai = 0.0;
                aj = -diff;
            }
            if diff > c_i - c_j {
                if ai > c_i {
                    ai = c_i;
                    aj = c_i - diff;
                }
            } else if aj > c_j {
                aj = c_j;
                ai = c_j + diff;
            }
        } else {
            let delta = (gi - gj) / quad;
            let sum = ai + aj;
            ai -= delta;
            aj += delta;
            if sum > c_i {
                if ai > c_i {
                    ai = c_i;
                    aj = sum - c_i;
                }
            } else if aj < 0.0 {
                aj = 0.0;
                ai = sum;
            }
            if sum > c_j {
                if aj > c_j {
                    aj = c_j;
                    ai = sum - c_j;
                }
            } else if ai < 0.0 {
                ai = 0.0;
                aj = sum;
            }
        }
        self.alpha[i] = ai;
        self.alpha[j] = aj;
        let (di, dj) = (ai - old_i, aj - old_j);
        let (ci, cj) = (yi * di, yj * dj);
        let active = self.active;
        for ((g, &y), (&ki, &kj)) in self.grad[..active]
            .iter_mut()
            .zip(&self.y[..active])
            .zip(row_i.iter().zip(row_j))
        {
            *g += y * (ci * ki.widen() + cj * kj.widen());
        }
        (di, dj)
    }

    /// The pair step of a tube's variables, i from I_up and j from I_low: beta_i += d,
    /// beta_j -= d with the d >= 0 that minimises the objective along the pair, then the
    /// gradient update. Returns (d, -d).
    fn tube_step<T: RowValue>(
        &mut self,
        i: usize,
        j: usize,
        row_i: &[T],
        row_j: &[T],
    ) -> (f64, f64) {
        let quad = self.diag[i] + self.diag[j] - 2.0 * row_i[j].widen();
        let (bi, bj) = (self.alpha[i], self.alpha[j]);
        let (ci, cj) = (self.upper[i], self.upper[j]);
        let (room_i, room_j) = (ci - bi, bj + cj);
        let d = tube_pair_step(TubePair {
            slope: self.low_value(j) - self.up_value(i),
            quad: if quad > 0.0 { quad } else { TAU },
            tube: self.tube,
            beta_i: bi,
            beta_j: bj,
            room: room_i.min(room_j),
        });
        // A variable the step takes to its kink or its bound is set to it exactly: shrinking
        // and G_bar compare with 0 and +-C.
        self.alpha[i] = if d == room_i {
            ci
        } else if bi < 0.0 && d == -bi {
            0.0
        } else {
            bi + d
        };
        self.alpha[j] = if d == room_j {
            -cj
        } else if bj > 0.0 && d == bj {
            0.0
        } else {
            bj - d
        };
        let (di, dj) = (self.alpha[i] - bi, self.alpha[j] - bj);
        let active = self.active;
        for (g, (&ki, &kj)) in self.grad[..active].iter_mut().zip(row_i.iter().zip(row_j)) {
            *g += di * ki.widen() + dj * kj.widen();
        }
        (di, dj)
    }
}

/// A tube's shift of a variable's value at beta_t = a: (as an i, as a j). Raising beta costs
/// epsilon from 0 up and saves it below 0; lowering it saves epsilon above 0 and costs it from
/// 0 down, so a row inside the tube (beta = 0) has values 2 epsilon apart.
#[inline(always)]
pub(crate) fn tube_shifts(a: f64, tube: f64) -> (f64, f64) {
    (
        if a >= 0.0 { -tube } else { tube },
        if a > 0.0 { -tube } else { tube },
    )
}

/// One pair step of a tube (`DualState::tube_step`): the objective along beta_i + d,
/// beta_j - d is slope d + quad d^2 / 2 plus the tube's kinks, each adding 2 epsilon to the
/// slope where its variable crosses 0.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TubePair {
    /// The objective's slope at d = 0+ (negative for a violating pair).
    pub slope: f64,
    /// Its curvature, > 0.
    pub quad: f64,
    pub tube: f64,
    pub beta_i: f64,
    pub beta_j: f64,
    /// The largest d the boxes allow.
    pub room: f64,
}

/// The minimiser over [0, room] of the convex piecewise quadratic `TubePair`: the kinks in
/// order, stopping in the first piece whose own minimiser lies inside it (or at the kink that
/// turns the slope positive).
pub(crate) fn tube_pair_step(pair: TubePair) -> f64 {
    let mut kinks = [f64::INFINITY; 2];
    if pair.beta_i < 0.0 {
        kinks[0] = -pair.beta_i;
    }
    if pair.beta_j > 0.0 {
        kinks[1] = pair.beta_j;
    }
    if kinks[1] < kinks[0] {
        kinks.swap(0, 1);
    }
    let mut slope = pair.slope;
    let mut from = 0.0;
    for kink in kinks {
        let end = kink.min(pair.room);
        let d = -slope / pair.quad;
        if d <= end {
            return d.max(from);
        }
        if kink >= pair.room {
            return pair.room;
        }
        slope += 2.0 * pair.tube;
        from = kink;
    }
    (-slope / pair.quad).clamp(from, pair.room)
}

/// What an exact solver run returns for one binary problem.
#[derive(Debug, Clone)]
pub struct DualSolution {
    pub alpha: Vec<f64>,
    pub y: Vec<f64>,
    pub rho: f64,
    /// With a sum per label, the multiplier of the sum constraint (LIBSVM's r: nu-SVC divides
    /// by it, nu-SVR's epsilon is -r); 0 otherwise.
    pub r: f64,
    /// f(a) = 1/2 a^T Q a - e^T a (LIBSVM's `obj`, minus the usual dual).
    pub objective: f64,
    /// Pair steps, as LIBSVM counts its iterations (ALFPGM: those inside its working sets).
    pub iterations: u64,
    /// ALFPGM only: working sets solved.
    pub working_sets: u64,
    pub converged: bool,
    /// m(a) - M(a) at the end.
    pub gap: f64,
    pub cache: CacheStats,
    pub seconds: f64,
    /// ALFPGM only: single-pair SMO steps taken because a multi-pair step made no progress.
    pub fallback_steps: u64,
    /// ALFPGM only: FISTA iterations over all subproblems.
    pub inner_iterations: u64,
    /// The smallest number of active (unshrunk) variables during the run.
    pub min_active: usize,
    /// Strides taken (`stride`).
    pub strides: u64,
    /// The gradient at the solution and G_bar (empty when not shrinking), in the variables'
    /// order: what a start derived from this solution needs (`DualProblem::start_gradient`).
    pub grad: Vec<f64>,
    pub grad_bar: Vec<f64>,
}

impl DualSolution {
    /// The solution of a state whose gradient is complete (nothing shrunk), in the variables'
    /// original order.
    pub fn from_state(state: DualState, iterations: u64, converged: bool, start: Instant) -> Self {
        debug_assert_eq!(state.active, state.n());
        let mut state = state.into_original_order();
        let gap = state.gap();
        let (rho, r) = state.rho_and_r();
        let objective = state.objective();
        let positions = state.n();
        let (grad, grad_bar) = (
            std::mem::take(&mut state.grad),
            std::mem::take(&mut state.grad_bar),
        );
        let (alpha, y) = if state.paired {
            // LIBSVM's variables: (a, a*) with labels (+1, -1).
            let n = state.n();
            let y = (0..2 * n).map(|t| if t < n { 1.0 } else { -1.0 }).collect();
            ([state.alpha, state.alpha_star].concat(), y)
        } else {
            (state.alpha, state.y)
        };
        DualSolution {
            min_active: positions,
            rho,
            r,
            objective,
            iterations,
            converged,
            gap,
            cache: CacheStats::default(),
            seconds: start.elapsed().as_secs_f64(),
            fallback_steps: 0,
            inner_iterations: 0,
            working_sets: 0,
            strides: 0,
            alpha,
            y,
            grad,
            grad_bar,
        }
    }

    pub fn n_sv(&self) -> usize {
        self.alpha.iter().filter(|&&a| a != 0.0).count()
    }
}

/// Reports to the shared monitor: a heartbeat every 100 ms (Ctrl-C), and a progress line
/// (`epoch_done = true`) every `report` seconds when asked.
pub struct Reporter<'m, 'a> {
    monitor: &'m Mutex<Monitor<'a>>,
    template: Progress,
    heartbeat: Heartbeat,
    last_report: Instant,
    report_every: Option<Duration>,
    start: Instant,
    /// The last step `tick` saw (what `keep_alive` reports).
    last_step: u64,
}

impl<'m, 'a> Reporter<'m, 'a> {
    pub fn new(
        monitor: &'m Mutex<Monitor<'a>>,
        template: Progress,
        report_every: Option<Duration>,
    ) -> Self {
        Reporter {
            monitor,
            template,
            heartbeat: Heartbeat::new(Duration::from_millis(100)),
            last_report: Instant::now(),
            report_every,
            start: Instant::now(),
            last_step: 0,
        }
    }

    /// Between steps, inside long work (the start's gradient, a gradient reconstruction):
    /// reaches the monitor every 100 ms (Ctrl-C) without a progress line.
    pub(crate) fn keep_alive(&mut self, state: &DualState) -> Result<()> {
        if self.heartbeat.due(0) {
            self.send(state, self.last_step, f64::NAN, false)
        } else {
            Ok(())
        }
    }

    fn send(&self, state: &DualState, iteration: u64, gap: f64, done: bool) -> Result<()> {
        let mut m = self.monitor.lock().unwrap_or_else(|e| e.into_inner());
        (*m)(&Progress {
            iteration,
            n_sv: state.n_sv(),
            seconds: self.start.elapsed().as_secs_f64(),
            epoch_done: done,
            gap: Some(gap),
            ..self.template.clone()
        })
    }

    /// Called once per decomposition step (`step` counts them; cheap steps call it with
    /// `cheap = true`, and the clock is then read every 1024 steps only).
    pub(crate) fn tick(&mut self, state: &DualState, step: u64, cheap: bool) -> Result<()> {
        self.last_step = step;
        let due = if cheap {
            self.heartbeat.due(step)
        } else {
            self.heartbeat.due(0)
        };
        if !due {
            return Ok(());
        }
        let report = self
            .report_every
            .is_some_and(|every| self.last_report.elapsed() >= every);
        if report {
            self.last_report = Instant::now();
            self.send(state, step, state.gap(), true)
        } else {
            self.send(state, step, f64::NAN, false)
        }
    }

    /// The line at the end of a problem.
    pub(crate) fn finish(&mut self, solution: &DualSolution) -> Result<()> {
        let mut m = self.monitor.lock().unwrap_or_else(|e| e.into_inner());
        (*m)(&Progress {
            iteration: solution.iterations,
            n_sv: solution.n_sv(),
            seconds: self.start.elapsed().as_secs_f64(),
            epoch_done: self.report_every.is_some(),
            gap: Some(solution.gap),
            ..self.template.clone()
        })
    }
}

/// When an exact solver stops, and how it shrinks.
#[derive(Debug, Clone, Copy)]
pub struct ExactRun {
    /// Stop when m(a) - M(a) < tol.
    pub tol: f64,
    /// Pair steps at most, as LIBSVM counts its iterations (ALFPGM: those inside its working
    /// sets); reported as not converged when reached.
    pub max_iter: u64,
    /// `Shrinking::new`'s schedule: None = no shrinking.
    pub shrinking: Option<usize>,
}
