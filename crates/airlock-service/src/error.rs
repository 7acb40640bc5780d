//! The one error of the service layer is the protocol's [`Error`]: a
//! stable [`ErrorCode`] and a message. These conversions are the only
//! place lower layers' errors become codes.

use airlock_protocol::{Error, ErrorCode};
use airlock_store::StoreError;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A store failure as the service reports it: the typed refusals keep
/// their meaning, anything else is internal.
pub(crate) fn store(e: StoreError) -> Error {
    match e {
        StoreError::IdempotencyConflict => Error::new(
            ErrorCode::IdempotencyConflict,
            "idempotency key reused with a different request",
        ),
        StoreError::NotFound => Error::not_found(),
        StoreError::Plan(r) => Error::new(ErrorCode::PlanRefused, format!("plan refused: {r}")),
        StoreError::Conflict => Error::new(ErrorCode::Conflict, "already exists; retry"),
        StoreError::LastOwner => {
            Error::new(ErrorCode::LastOwner, "a workspace keeps at least one owner")
        }
        other => Error::internal(other),
    }
}

/// `?` on store calls inside the service.
pub(crate) trait StoreResultExt<T> {
    fn svc(self) -> Result<T>;
}

impl<T> StoreResultExt<T> for std::result::Result<T, StoreError> {
    fn svc(self) -> Result<T> {
        self.map_err(store)
    }
}

impl From<crate::secrets::SecretError> for Error {
    fn from(e: crate::secrets::SecretError) -> Self {
        use crate::secrets::SecretError as S;
        let code = match &e {
            S::Invalid(_) => ErrorCode::SecretInvalid,
            S::Platform(_) => ErrorCode::SecretForbidden,
            S::Missing(_) => ErrorCode::SecretMissing,
            S::Vault(airlock_vault::VaultError::Rollback { .. }) => ErrorCode::SecretRollback,
            S::Vault(_) | S::Store(_) | S::Corrupt(_) => ErrorCode::Internal,
        };
        Error::new(code, e.to_string())
    }
}
