//! Driving a gateway binary with the training shapes and checking every answer: the shapes as data
//! (`shapes`), what the mock answers and so what a response must be (`check`), the keep-alive load
//! driver (`load`), the gateway's training command (`train`), a throwaway redis-server for the
//! shared-limits shapes (`redis`), and the stand-in gateway of the trainer's own tests
//! (`fake_gateway`).

pub mod check;
pub mod fake_gateway;
pub mod load;
pub mod redis;
pub mod shapes;
pub mod train;
