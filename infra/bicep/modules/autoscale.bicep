metadata name = 'Ray workers autoscale'
metadata description = 'CPU autoscale of one worker pool: average CPU above scaleOutCpuPercent over 5 minutes adds one worker, below scaleInCpuPercent removes one, within workerMinCount..workerMaxCount.'

@description('Required. Azure region of the autoscale setting.')
param location string

@description('Required. Name of the autoscale setting, e.g. "ray-workers-autoscale".')
param name string

@description('Required. Tags for every resource.')
param tags object

@description('Required. Resource ID of the workers\' scale set.')
param scaleSetId string

@description('Required. Fewest workers.')
param minCount int

@description('Required. Workers when the metric cannot be read.')
param defaultCount int

@description('Required. Most workers.')
param maxCount int

@description('Required. Average CPU percentage above which one worker is added.')
param scaleOutCpuPercent int

@description('Required. Average CPU percentage below which one worker is removed.')
param scaleInCpuPercent int

@description('Required. Minutes to wait after adding a worker.')
param scaleOutCooldownMinutes int

@description('Required. Minutes to wait after removing a worker.')
param scaleInCooldownMinutes int

@description('Required. Resource ID of the autostop role definition, or empty (autostop off).')
param autostopRoleDefinitionId string

@description('Required. Principal (object) id of the head\'s own identity, which autostop acts with, or empty.')
param autostopPrincipalId string

resource autoscale 'Microsoft.Insights/autoscalesettings@2022-10-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    name: name
    enabled: true
    targetResourceUri: scaleSetId
    profiles: [
      {
        name: 'cpu'
        capacity: {
          minimum: string(minCount)
          default: string(defaultCount)
          maximum: string(maxCount)
        }
        rules: [
          {
            metricTrigger: {
              metricName: 'Percentage CPU'
              metricResourceUri: scaleSetId
              timeGrain: 'PT1M'
              statistic: 'Average'
              timeWindow: 'PT5M'
              timeAggregation: 'Average'
              operator: 'GreaterThan'
              threshold: scaleOutCpuPercent
            }
            scaleAction: {
              direction: 'Increase'
              type: 'ChangeCount'
              value: '1'
              cooldown: 'PT${scaleOutCooldownMinutes}M'
            }
          }
          {
            metricTrigger: {
              metricName: 'Percentage CPU'
              metricResourceUri: scaleSetId
              timeGrain: 'PT1M'
              statistic: 'Average'
              timeWindow: 'PT5M'
              timeAggregation: 'Average'
              operator: 'LessThan'
              threshold: scaleInCpuPercent
            }
            scaleAction: {
              direction: 'Decrease'
              type: 'ChangeCount'
              value: '1'
              cooldown: 'PT${scaleInCooldownMinutes}M'
            }
          }
        ]
      }
    ]
  }
}

// Autostop: the head's own identity may turn this setting off and on (identity.bicep: the role).
resource autostopRole 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(autostopRoleDefinitionId)) {
  scope: autoscale
  name: guid(autoscale.id, last(split(autostopRoleDefinitionId, '/')))
  properties: {
    roleDefinitionId: autostopRoleDefinitionId
    principalId: autostopPrincipalId
    principalType: 'ServicePrincipal'
  }
}

@description('Resource ID of the autoscale setting.')
output id string = autoscale.id
