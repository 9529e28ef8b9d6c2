//! A command of the batch still in play ([`Pending`]) and the reply for one
//! already found in the command log ([`stored_answer`]).
//!
//! Both the batch loop (`pipeline`) and the gift saga step (`gifts`) work on
//! the batch's pending commands, and `pipeline` calls into `gifts`: keeping
//! the shared batch types here, below both, is what keeps `gifts` from
//! importing `pipeline` back.

use hyapp_api::room::CommandReply;

use crate::Error;
use crate::cell::{CommandJob, replay_or_conflict};
use crate::store::StoredCommand;
use crate::timing::StageTimings;

/// A command of the batch still in play.
pub(crate) struct Pending {
    pub(crate) job: CommandJob,
    pub(crate) stages: StageTimings,
    /// Saga row written and the wallet debited: must commit or be compensated.
    pub(crate) debited: bool,
}

/// The reply for a command found in the log.
pub(crate) fn stored_answer(entry: &Pending, found: &StoredCommand) -> Result<CommandReply, Error> {
    use prost::Message;
    let reply = CommandReply::decode(found.reply.as_slice()).map_err(|error| {
        Error::Internal(format!(
            "stored reply of {} is undecodable: {error}",
            found.command_id
        ))
    })?;
    replay_or_conflict(
        &entry.job.request,
        &found.fingerprint,
        &found.command_name,
        &found.room_id,
        &reply,
    )
}
