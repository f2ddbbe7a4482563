//! The sans-IO protocol cores of the initiator and the target, and a
//! simulator that runs them against each other in memory (tests, fuzzing).

pub mod initiator;
pub mod sim;
pub mod target;
