"""Teacher contexts (RAS role conditions, PAC privileged block), attribution model route, teacher scoring."""
