//! What an agent run may spend (AGT-7), and which limit ends it.
//!
//! The harness checks [`Budgets::check`] before every model request and
//! before every tool dispatch, and adds what each spent. A limit is a
//! ceiling that is reached, never crossed by a step the harness could have
//! refused: with `steps = 3` exactly three model requests are made; with
//! `tool_calls = 2` exactly two tools are dispatched. Tokens, cost and
//! egress bytes are known only after the step that spent them, so the step
//! that reaches the limit completes and nothing starts after it. Wall time
//! counts the run's own work; time spent waiting for a person to decide an
//! approval is excluded.

use serde::{Deserialize, Serialize};

/// Limits; `None` means unlimited (the operator's caps still apply).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budgets {
    /// Model requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<u64>,
    /// Tool calls dispatched (refused and invalid calls do not count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<u64>,
    /// Input plus output tokens, as the provider reported them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Cost in billionths of a US dollar (nano-dollars), from the profile's price table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_nano_usd: Option<u64>,
    /// The run's own time in milliseconds, approval waits excluded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_time_ms: Option<u64>,
    /// Bytes through the run's egress proxy, both directions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_bytes: Option<u64>,
}

/// What a run has spent so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spent {
    pub steps: u64,
    pub tool_calls: u64,
    pub tokens: u64,
    pub cost_nano_usd: u64,
    pub wall_time_ms: u64,
    pub egress_bytes: u64,
}

/// The budget that ended a run; each has its own run error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Budget {
    Steps,
    ToolCalls,
    Tokens,
    Cost,
    WallTime,
    EgressBytes,
}

impl Budget {
    pub const ALL: [Budget; 6] = [
        Self::Steps,
        Self::ToolCalls,
        Self::Tokens,
        Self::Cost,
        Self::WallTime,
        Self::EgressBytes,
    ];

    /// The run error code that names this budget.
    pub fn code(self) -> &'static str {
        match self {
            Self::Steps => "budget_steps",
            Self::ToolCalls => "budget_tool_calls",
            Self::Tokens => "budget_tokens",
            Self::Cost => "budget_cost",
            Self::WallTime => "budget_wall_time",
            Self::EgressBytes => "budget_egress_bytes",
        }
    }
}

/// A limit was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the {} budget is spent ({spent} of {limit})", budget.code().trim_start_matches("budget_"))]
pub struct BudgetExceeded {
    pub budget: Budget,
    pub limit: u64,
    pub spent: u64,
}

/// What the harness is about to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    ModelRequest,
    ToolCall,
}

impl Budgets {
    fn limit(&self, b: Budget) -> Option<u64> {
        match b {
            Budget::Steps => self.steps,
            Budget::ToolCalls => self.tool_calls,
            Budget::Tokens => self.tokens,
            Budget::Cost => self.cost_nano_usd,
            Budget::WallTime => self.wall_time_ms,
            Budget::EgressBytes => self.egress_bytes,
        }
    }

    /// Whether `next` may start given what was spent. The budgets that
    /// only grow by starting something count the thing about to start
    /// (`steps` for a model request, `tool_calls` for a dispatch); the
    /// others are spent when they reach their limit.
    pub fn check(&self, spent: &Spent, next: Next) -> Result<(), BudgetExceeded> {
        for b in Budget::ALL {
            let Some(limit) = self.limit(b) else {
                continue;
            };
            let (used, counts_next) = match b {
                Budget::Steps => (spent.steps, next == Next::ModelRequest),
                Budget::ToolCalls => (spent.tool_calls, next == Next::ToolCall),
                Budget::Tokens => (spent.tokens, false),
                Budget::Cost => (spent.cost_nano_usd, false),
                Budget::WallTime => (spent.wall_time_ms, false),
                Budget::EgressBytes => (spent.egress_bytes, false),
            };
            let over = match b {
                // Counted budgets: may the next one start? (Another kind
                // of step does not spend them.)
                Budget::Steps | Budget::ToolCalls if counts_next => used.saturating_add(1) > limit,
                Budget::Steps | Budget::ToolCalls => used > limit,
                // Measured budgets end the run once reached, whatever
                // comes next.
                _ => used >= limit,
            };
            if over {
                return Err(BudgetExceeded {
                    budget: b,
                    limit,
                    spent: used,
                });
            }
        }
        Ok(())
    }

    /// Lower every limit to the cap's where the cap is stricter (an
    /// operator's ceiling over what a worker asked for).
    pub fn capped_by(&self, cap: &Budgets) -> Budgets {
        fn min(a: Option<u64>, b: Option<u64>) -> Option<u64> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        Budgets {
            steps: min(self.steps, cap.steps),
            tool_calls: min(self.tool_calls, cap.tool_calls),
            tokens: min(self.tokens, cap.tokens),
            cost_nano_usd: min(self.cost_nano_usd, cap.cost_nano_usd),
            wall_time_ms: min(self.wall_time_ms, cap.wall_time_ms),
            egress_bytes: min(self.egress_bytes, cap.egress_bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn agt_7_counted_budgets_allow_exactly_their_limit() {
        let b = Budgets {
            steps: Some(3),
            tool_calls: Some(2),
            ..Budgets::default()
        };
        let mut s = Spent::default();
        let mut requests = 0;
        while b.check(&s, Next::ModelRequest).is_ok() {
            s.steps += 1;
            requests += 1;
        }
        assert_eq!(requests, 3);
        let e = b.check(&s, Next::ModelRequest).unwrap_err();
        assert_eq!((e.budget, e.limit, e.spent), (Budget::Steps, 3, 3));
        assert_eq!(e.budget.code(), "budget_steps");

        let mut s = Spent::default();
        let mut calls = 0;
        while b.check(&s, Next::ToolCall).is_ok() {
            s.tool_calls += 1;
            calls += 1;
        }
        assert_eq!(calls, 2);
        // Steps are not spent by tool calls: the run may still ask the
        // model, which then learns nothing more can run.
        assert_eq!(b.check(&s, Next::ModelRequest), Ok(()));
    }

    /// The limit and the spent counter of a measured budget.
    fn fields<'a>(
        b: &'a mut Budgets,
        s: &'a mut Spent,
        budget: Budget,
    ) -> (&'a mut Option<u64>, &'a mut u64) {
        match budget {
            Budget::Tokens => (&mut b.tokens, &mut s.tokens),
            Budget::Cost => (&mut b.cost_nano_usd, &mut s.cost_nano_usd),
            Budget::WallTime => (&mut b.wall_time_ms, &mut s.wall_time_ms),
            Budget::EgressBytes => (&mut b.egress_bytes, &mut s.egress_bytes),
            Budget::Steps => (&mut b.steps, &mut s.steps),
            Budget::ToolCalls => (&mut b.tool_calls, &mut s.tool_calls),
        }
    }

    #[test]
    fn agt_7_measured_budgets_end_the_run_once_reached() {
        for budget in [
            Budget::Tokens,
            Budget::Cost,
            Budget::WallTime,
            Budget::EgressBytes,
        ] {
            let mut b = Budgets::default();
            let mut s = Spent::default();
            let (limit, used) = fields(&mut b, &mut s, budget);
            *limit = Some(100);
            *used = 99;
            for next in [Next::ModelRequest, Next::ToolCall] {
                assert_eq!(b.check(&s, next), Ok(()), "{budget:?} below its limit");
            }
            *fields(&mut b, &mut s, budget).1 = 100;
            for next in [Next::ModelRequest, Next::ToolCall] {
                let e = b.check(&s, next).unwrap_err();
                assert_eq!(e.budget, budget);
                assert_eq!((e.limit, e.spent), (100, 100));
            }
        }
    }

    #[test]
    fn agt_7_each_budget_has_its_own_code() {
        let codes: std::collections::HashSet<_> = Budget::ALL.iter().map(|b| b.code()).collect();
        assert_eq!(codes.len(), Budget::ALL.len());
        assert_eq!(
            Budgets::default().check(&Spent::default(), Next::ToolCall),
            Ok(())
        );
    }

    #[test]
    fn agt_7_caps_only_lower_limits() {
        let asked = Budgets {
            steps: Some(50),
            tokens: None,
            tool_calls: Some(5),
            ..Budgets::default()
        };
        let cap = Budgets {
            steps: Some(20),
            tokens: Some(1_000),
            tool_calls: Some(10),
            ..Budgets::default()
        };
        let got = asked.capped_by(&cap);
        assert_eq!(
            (got.steps, got.tokens, got.tool_calls),
            (Some(20), Some(1_000), Some(5))
        );
    }

    #[test]
    fn budgets_refuse_unknown_fields() {
        assert!(serde_json::from_str::<Budgets>(r#"{"step": 3}"#).is_err());
        let b: Budgets = serde_json::from_str(r#"{"steps": 3, "cost_nano_usd": 10}"#).unwrap();
        assert_eq!(b.steps, Some(3));
    }
}
