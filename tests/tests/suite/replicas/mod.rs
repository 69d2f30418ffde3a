//! Running as replicas (issue 17): one outbox relay per schema and one replica per periodic
//! tick through a lost database connection, and whole planes of two replicas under faults.

mod faults;
mod fixture;
mod relay;
mod stop;
mod ticks;
