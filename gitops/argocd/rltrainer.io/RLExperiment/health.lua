-- Argo CD health check for rltrainer.io/RLExperiment (Lua 5.1, as Argo CD runs it).
--   Healthy:     Succeeded, or Running with a current Ready=True condition
--   Progressing: Pending, Provisioning, Restarting, Running but not yet Ready, no status yet,
--                or a status older than the spec (status.observedGeneration < metadata.generation)
--   Degraded:    Failed
--   Suspended:   Suspended (spec.suspend: true), or Queued (Kueue holds it: waiting for quota or
--                readmission after a preemption, an external event as for a suspended Job)
-- Conditions computed for an older generation (their observedGeneration) are ignored.
local hs = {}

local function condition(status, conditionType, generation)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == conditionType then
      if generation ~= nil and c.observedGeneration ~= nil and c.observedGeneration < generation then
        return nil
      end
      return c
    end
  end
  return nil
end

-- The condition's message when it has one, else the status message, else the fallback.
local function message(c, status, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  if status.message ~= nil and status.message ~= "" then
    return status.message
  end
  return fallback
end

if obj.status == nil or obj.status.phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to pick up the experiment"
  return hs
end

local status = obj.status
local generation = nil
if obj.metadata ~= nil then
  generation = obj.metadata.generation
end
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to act on generation " .. generation
  return hs
end

local phase = status.phase
if phase == "Succeeded" then
  hs.status = "Healthy"
  hs.message = message(condition(status, "Succeeded", generation), status, "Training finished")
elseif phase == "Failed" then
  hs.status = "Degraded"
  hs.message = message(condition(status, "Failed", generation), status, "Training failed")
elseif phase == "Suspended" then
  hs.status = "Suspended"
  hs.message = message(condition(status, "Suspended", generation), status, "Suspended")
elseif phase == "Queued" then
  hs.status = "Suspended"
  hs.message = message(condition(status, "Queued", generation), status, "Queued by Kueue")
elseif phase == "Running" then
  local ready = condition(status, "Ready", generation)
  if ready ~= nil and ready.status == "True" then
    hs.status = "Healthy"
    hs.message = message(ready, status, "Training")
  else
    hs.status = "Progressing"
    hs.message = message(nil, status, "Waiting for the training job to report progress")
  end
elseif phase == "Pending" or phase == "Provisioning" then
  hs.status = "Progressing"
  hs.message = message(nil, status, phase)
elseif phase == "Restarting" then
  hs.status = "Progressing"
  hs.message = message(condition(status, "Restarting", generation), status, "Restarting")
else
  hs.status = "Unknown"
  hs.message = "Unknown phase " .. tostring(phase)
end
return hs
