//! What the driver reads of the machine: the gateway's and the rig's CPU time, peak memory and
//! listening sockets (`procfs`).

pub mod procfs;
