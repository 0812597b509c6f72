// Purpose: exceptions to exit codes and messages (see Errors.h).
#include "runner/cli/Errors.h"

#include <c10/util/Exception.h>

#include <stdexcept>

#include "runner/api/Data.h"
#include "runner/checkpoint/CheckpointStore.h"
#include "runner/dist/Dist.h"
#include "runner/report/Report.h"
#include "runner/report/Sweep.h"
#include "runner/spec/Spec.h"
#include "runner/step/Step.h"
#include "runner/util/AtomicFile.h"
#include "runner/util/ExitCodes.h"
#include "runner/util/JsonFields.h"
#include "runner/util/Log.h"

namespace exprun {
namespace {

int fail(int code, const std::string& command, const std::string& what) {
  log::error(command + ": " + what);
  return code;
}

}  // namespace

int exitCodeOfFailure(const std::string& command) {
  try {
    throw;
  } catch (const CheckpointError& e) {
    return fail(kExitBadInput, command, std::string("checkpoint: ") + e.what());
  } catch (const SpecError& e) {  // these name the file (and line, key or field) themselves
    return fail(kExitBadInput, command, e.what());
  } catch (const DataError& e) {
    return fail(kExitBadInput, command, e.what());
  } catch (const DistError& e) {
    return fail(kExitBadInput, command, e.what());
  } catch (const CollectiveError& e) {
    return fail(kExitCollective, command, e.what());
  } catch (const SweepError& e) {
    return fail(kExitBadInput, command, e.what());
  } catch (const ReportError& e) {
    return fail(kExitBadInput, command, e.what());
  } catch (const JsonFieldError& e) {
    return fail(kExitBadInput, command, e.what());
  } catch (const std::invalid_argument& e) {  // a bad flag or option combination
    return fail(kExitBadInput, command, e.what());
  } catch (const NonFiniteError& e) {
    return fail(kExitFailure, command, e.what());
  } catch (const FileError& e) {  // names the file and the system's reason (e.g. a full disk)
    return fail(kExitFailure, command, e.what());
  } catch (const c10::Error& e) {
    return fail(kExitFailure, command, std::string("unexpected error: ") + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return fail(kExitFailure, command, std::string("unexpected error: ") + e.what());
  } catch (...) {
    return fail(kExitFailure, command, "unexpected error");
  }
}

}  // namespace exprun
