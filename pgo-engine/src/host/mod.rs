//! What the machine is doing while a training runs: its CPU time (`stat`), how much of it other
//! work took, which machine it is, and waiting until it is quiet (`load`).

pub mod load;
pub mod stat;
