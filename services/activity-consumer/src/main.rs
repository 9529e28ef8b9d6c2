//! Activity consumer: leaderboards, contribution totals and big-gift broadcasts.

fn main() {}
