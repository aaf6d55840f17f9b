//! The solvers that train on a budget: BSGD (primal, `bsgd`), BSCA (dual coordinate ascent,
//! `bsca`), and the polish (`polish`: the exact coefficients over the budgeted basis, its
//! Hessian-free direction in `conjugate_gradient`); what they
//! learn (`problem`), what they show after each epoch (`observer`), and what a step of BSGD and
//! of BSCA share (`step`). Uses every folder but `exact`.

pub mod bsca;
pub mod bsgd;
mod conjugate_gradient;
pub mod observer;
pub mod polish;
pub mod problem;
mod step;

#[cfg(test)]
mod layout_tests;
